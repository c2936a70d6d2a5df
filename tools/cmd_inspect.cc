// `promptcache inspect`: architecture, hyperparameters, tensor types and KV cache cost.
#include <cstdio>
#include <map>

#include "chat/chat_template.h"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

class InspectCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    sub->add_option("-m,--model", model_path_, "GGUF model file")->required();
    sub->add_flag("--tensors", list_tensors_, "list every tensor");
  }

  int Execute() override {
    std::unique_ptr<Model> m = LoadModelOrReport(model_path_, /*pack=*/false);
    if (!m) return 1;
    const ModelConfig& c = m->config();
    const GgufFile& f = m->file();
    std::printf("file:          %s (GGUF v%u, %.1f MiB)\n", model_path_.c_str(), f.version(),
                f.file_size() / 1048576.0);
    std::printf("name:          %s\n", c.name.empty() ? "-" : c.name.c_str());
    std::printf("architecture:  %s\n", c.architecture.c_str());
    std::printf("layers:        %d\n", c.n_layers);
    std::printf("n_embd:        %d\n", c.n_embd);
    std::printf("heads:         %d query, %d KV (head_dim %d)\n", c.n_heads, c.n_kv_heads,
                c.head_dim);
    std::printf("n_ff:          %d\n", c.n_ff);
    if (c.Moe()) {
      std::printf("experts:       %d, %d per token, n_ff %d each\n", c.n_expert, c.n_expert_used,
                  c.n_ff_exp);
    }
    std::printf("vocab:         %d (%s tokenizer)\n", c.n_vocab,
                m->tokenizer().kind() == TokenizerKind::kSpm ? "llama/SentencePiece"
                                                             : "gpt2/byte-level BPE");
    std::printf("context:       %d\n", c.context_length);
    std::printf("rope:          base %g%s%s\n", c.rope_base,
                c.rope_scaling.empty() ? "" : ", scaling ", c.rope_scaling.c_str());
    std::printf("rms eps:       %g\n", c.rms_eps);
    if (m->chat_template().empty()) {
      std::printf("chat template: none (chats use the plain format)\n");
    } else {
      const ChatTemplate chat(m->chat_template(), ChatTemplateOptions(m->tokenizer()));
      if (chat.uses_jinja()) {
        std::printf("chat template: Jinja, %zu bytes\n", m->chat_template().size());
      } else {
        std::printf("chat template: %zu bytes, not run (%s)\n", m->chat_template().size(),
                    chat.Warning().value_or("").c_str());
      }
    }
    std::map<std::string, std::pair<int, size_t>> types;
    size_t params = 0;
    for (const GgufTensorInfo& t : f.tensors()) {
      auto& e = types[GgmlTypeName(t.type)];
      e.first++;
      e.second += t.nbytes;
      params += t.elements();
    }
    std::printf("parameters:    %.1f M\n", params / 1e6);
    for (const auto& [name, e] : types) {
      std::printf("tensors %-6s %d, %.1f MiB\n", (name + ":").c_str(), e.first,
                  e.second / 1048576.0);
    }
    const KvLayout f16 = m->MakeKvLayout(KvType::kF16), f32 = m->MakeKvLayout(KvType::kF32);
    std::printf(
        "KV cache:      %zu bytes/token in F16, %zu in F32 (%.1f MiB for the full context in "
        "F16)\n",
        f16.bytes_per_token(), f32.bytes_per_token(),
        f16.bytes_per_token() * double(c.context_length) / 1048576.0);
    if (CheckKvType(KvType::kQ8_0, c.kv_dim()).ok()) {
      std::printf("               %zu in Q8_0, %zu in Q4_0\n",
                  m->MakeKvLayout(KvType::kQ8_0).bytes_per_token(),
                  m->MakeKvLayout(KvType::kQ4_0).bytes_per_token());
    }
    std::printf("fingerprint:   %s\n", m->fingerprint().c_str());
    if (list_tensors_) {
      for (const GgufTensorInfo& t : f.tensors()) {
        std::string dims;
        for (int64_t d : t.dims) dims += (dims.empty() ? "" : " x ") + std::to_string(d);
        std::printf("  %-28s %-6s %s\n", t.name.c_str(), GgmlTypeName(t.type).c_str(),
                    dims.c_str());
      }
    }
    return 0;
  }

 private:
  std::string model_path_;
  bool list_tensors_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeInspectCommand() { return std::make_unique<InspectCommand>(); }

}  // namespace promptcache::cli
