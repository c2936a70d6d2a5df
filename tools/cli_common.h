// Shared pieces of the `promptcache` subcommands: the options every model-running command takes
// (-m, -t, -c), loading a model with a one-line error, and turning a prompt into tokens.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "engine/runner.h"
#include "model/model.h"
#include "promptcache/engine.h"

namespace promptcache::cli {

// Each subcommand registers its options on its CLI11 sub-app and runs when chosen.
class Command {
 public:
  virtual ~Command() = default;
  virtual void Register(CLI::App* sub) = 0;
  // The process exit code.
  virtual int Execute() = 0;
};

struct ModelOptions {
  std::string model_path;
  int threads = 0;
  int context = 0;
  std::string kv_type = "f16";
  bool static_cache = false;
  int batch_size = 0;
  std::string isa;
  bool special = false;  // special-token spellings in the prompt's text become special tokens
  bool allow_long_context = false;
  std::string chat_template_path;  // --chat-template, for the commands that render chats
  bool no_trim_sliding = false;    // keep sliding layers' K/V past their window

  void Register(CLI::App* sub);
  // --kv-type as a KvType (after Validate()).
  KvType KvTypeValue() const;
  // --chat-template FILE: a Jinja chat template instead of the model file's.
  void RegisterChatTemplate(CLI::App* sub);
  // The --chat-template file's text, or "" when the option was not given.
  Result<std::string> ChatTemplateText() const;
  // Applies --chat-template to a loaded model.
  Status ApplyChatTemplate(Model* model) const;
  Status Validate() const;
  // What needs the model: the context against what it was trained for; then prepares the
  // model for that context (Model::UseContext: LongRoPE's frequencies).
  Status Check(Model& model) const;
  RunnerOptions ToRunnerOptions() const;
  // The engine options these flags set (model, threads, context, KV type, batch size, sliding
  // layers, special tokens); the caller adds what its command serves.
  EngineOptions ToEngineOptions() const;
  // The name tools/cmd_bench.cc still uses (another branch edits that file; see engine/runner.h).
  RunnerOptions ToSessionOptions() const { return ToRunnerOptions(); }
};

// The sampling flags `run` and `prompt` share: --temp, --seed, --top-k, --top-p, --min-p,
// --repeat-penalty, --stop (repeatable) and --ignore-eos.
struct SamplingOptions {
  SamplingParams params;
  std::vector<std::string> stop;
  bool ignore_eos = false;

  void Register(CLI::App* sub);
};

// --draft-max N and --draft-ngram N: speculative decoding (EngineOptions::draft_max,
// draft_ngram_min) for the commands that decode through the Engine (run, serve).
struct DraftFlags {
  int max = EngineOptions().draft_max;
  int ngram_min = EngineOptions().draft_ngram_min;

  void Register(CLI::App* sub);
  void Apply(EngineOptions* o) const {
    o->draft_max = max;
    o->draft_ngram_min = ngram_min;
  }
};

// --isa NAME: run the kernels with this instruction set (a Highway target this CPU supports,
// e.g. AVX2) instead of the best one; where wider vectors lower the clock, a narrower set can
// be faster.
void AddIsaOption(CLI::App* sub, std::string* isa);
// Applies --isa for the rest of the process (nothing when empty); an unknown or unsupported name
// is an error listing the supported ones.
Status SelectIsa(const std::string& isa);

// Prints "promptcache: error: <message>" on stderr and returns 1.
// `text` with C-style escapes replaced (\n \t \r \f \v \a \b \\ \" \' \xHH), so that a flag
// can give a separator such as "\n\n---\n\n" on a command line. InvalidArgument names an
// unknown escape or one cut short.
Result<std::string> UnescapeC(std::string_view text);

int Fail(const Status& status);
int Fail(const std::string& message);

// Loads the model with a progress note; on failure prints the error and returns null. `pack`:
// repack the quantized matrices for running (commands that only read the file skip it).
std::unique_ptr<Model> LoadModelOrReport(const std::string& path, bool pack = true);

// The whole of a file's bytes; NotFound naming it ("PATH: cannot open WHAT") when it cannot be
// opened.
Result<std::string> ReadTextFile(const std::string& path, std::string_view what = "file");

// The text of a --chat-template file ("" for an empty path). NotFound or IoError when it cannot
// be read; InvalidArgument, with the line, when it is empty or not a template promptcache runs.
Result<std::string> ReadChatTemplateFile(const std::string& path);

// Tokenizes the prompt, through the model's chat template (its Jinja template, or the fallback
// family) as one user message when `chat` is set. Special-token spellings in `text` stay text
// unless `special` is set.
Result<std::vector<int32_t>> PromptTokens(const Model& model, const std::string& text, bool chat,
                                          bool add_bos = true, bool special = false);

// Resident-set high-water mark of this process, from the kernel.
size_t PeakRssBytes();

std::unique_ptr<Command> MakeRunCommand();
std::unique_ptr<Command> MakeTokenizeCommand();
std::unique_ptr<Command> MakeVocabCommand();
std::unique_ptr<Command> MakeBenchCommand();
std::unique_ptr<Command> MakeSynthCommand();
std::unique_ptr<Command> MakeInspectCommand();
std::unique_ptr<Command> MakeServeCommand();
std::unique_ptr<Command> MakeSchemaCommand();
std::unique_ptr<Command> MakePromptCommand();
std::unique_ptr<Command> MakeEvalModulesCommand();
std::unique_ptr<Command> MakeEvalSegmentsCommand();
std::unique_ptr<Command> MakeEvalKvCommand();
std::unique_ptr<Command> MakeLogitsCommand();
std::unique_ptr<Command> MakeEmbedCommand();
std::unique_ptr<Command> MakeQuantizeCommand();

// How modular prompts are served when the prompt does not say: --positions schema|contiguous,
// --moved-keys copy|shared and --recompute SHARE.
struct ModularOptions {
  std::string positions = "schema";
  std::string moved_keys = "shared";
  double recompute = 0;
  std::string cache_redis;  // the remote tier, for `schema load` and `prompt`
  void Register(CLI::App* sub);
  // --cache-redis URL: modules found in (and written to) the Redis that servers share.
  void RegisterRedis(CLI::App* sub);
};

// An engine for the modular-prompt commands (schema, prompt, eval-modules): one sequence at a
// time, the disk tier in `cache_dir` when not empty.
Result<std::unique_ptr<Engine>> MakeEngine(const ModelOptions& model, const std::string& cache_dir,
                                           const ModularOptions& modular = {});
// The model `schema show` tokenizes with when -m is not given: shared/models/stories260K.gguf
// beside the repository the binary was built in.
std::string DefaultSchemaModel();

}  // namespace promptcache::cli
