// `promptcache synth`: a GGUF file with a real model's exact shape, seeded random weights and a
// real vocabulary, for measuring speed and memory at realistic sizes.
#include <strings.h>

#include <cstdio>
#include <memory>

#include "core/progress.h"
#include "model/synth.h"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

class SynthCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    std::string presets;
    for (const std::string& p : SynthPresets()) presets += (presets.empty() ? "" : ", ") + p;
    sub->add_option("--preset", preset_, "model shape: " + presets)->required();
    sub->add_option("--vocab", vocab_, "GGUF file whose vocabulary to use")->required();
    sub->add_option("--type", type_, "weight type: " + SynthTypeNames() + " (any case)")
        ->default_val("q8_0");
    sub->add_option("--seed", seed_, "random seed")->default_val(1);
    sub->add_option("--sharpen", sharpen_,
                    "multiply the query and key projections by this factor (attention scores by "
                    "its square), so that positions matter: random weights otherwise attend "
                    "almost uniformly (test fixtures; 0 < factor <= 100)")
        ->default_val(1.0f);
    sub->add_option("--layers", layers_,
                    "write only the preset's first N layers (a real shape's per-layer speed at "
                    "a fraction of its size; 0: all)")
        ->default_val(0);
    sub->add_option("-o,--output", out_, "output GGUF file")->required();
  }

  int Execute() override {
    SynthOptions o;
    o.preset = preset_;
    o.vocab_path = vocab_;
    o.seed = seed_;
    o.attn_sharpen = sharpen_;
    o.layers = layers_;
    o.out_path = out_;
    bool known = false;
    for (GgmlType t : SynthTypes()) {
      if (strcasecmp(GgmlTypeName(t).c_str(), type_.c_str()) == 0) {
        o.type = t;
        known = true;
      }
    }
    if (!known) return Fail("--type must be one of " + SynthTypeNames() + ", not '" + type_ + "'");
    std::unique_ptr<ProgressBar> bar;
    Status st = Synthesize(o, [&](size_t done, size_t total) {
      if (!bar) bar = std::make_unique<ProgressBar>("synth", static_cast<int64_t>(total));
      bar->Update(static_cast<int64_t>(done));
    });
    if (bar) bar->Finish();
    if (!st.ok()) return Fail(st);
    std::fprintf(stderr, "wrote %s\n", out_.c_str());
    return 0;
  }

 private:
  std::string preset_, vocab_, type_ = "q8_0", out_;
  uint64_t seed_ = 1;
  float sharpen_ = 1.0f;
  int layers_ = 0;
};

}  // namespace

std::unique_ptr<Command> MakeSynthCommand() { return std::make_unique<SynthCommand>(); }

}  // namespace promptcache::cli
