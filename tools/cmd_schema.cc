// `promptcache schema load|show`: encode a PML schema's modules into the cache (and persist them
// with --cache-dir), or print its layout.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/log.h"
#include "core/progress.h"
#include "engine/pml_encoder.h"
#include "tools/cli_common.h"

namespace promptcache::cli {

void ModularOptions::Register(CLI::App* sub) {
  sub->add_option("--positions", positions,
                  "where modular prompts' tokens sit when the prompt does not say: schema (the "
                  "reserved positions, gaps where modules are left out) or contiguous (end to "
                  "end from 0, as the same text sent plainly; cached keys re-rotated)")
      ->default_val("schema");
  sub->add_option("--moved-keys", moved_keys,
                  "how cached keys reach the positions contiguous mode moves them to: copy (into "
                  "fresh blocks, keys rotated) or shared (no copy: attention rotates the queries "
                  "that read them)")
      ->default_val("shared")
      ->check(CLI::IsMember({"copy", "shared"}));
  sub->add_option("--recompute", recompute,
                  "share (0 to 1) of the cached tokens encoded without part of a prompt's "
                  "context that is recomputed with it, those whose K/V move most (CacheBlend)")
      ->default_val(0.0);
}

void ModularOptions::RegisterRedis(CLI::App* sub) {
  sub->add_option("--cache-redis", cache_redis,
                  "remote tier shared with servers (redis://[:PASSWORD@]HOST[:PORT][/DB]): "
                  "modules are looked up there and written there");
}

Result<std::unique_ptr<Engine>> MakeEngine(const ModelOptions& model, const std::string& cache_dir,
                                           const ModularOptions& modular) {
  PC_RETURN_IF_ERROR(model.Validate());
  PC_ASSIGN_OR_RETURN(PmlPositions mode, ParsePmlPositions(modular.positions));
  if (!(modular.recompute >= 0 && modular.recompute <= 1)) {
    return InvalidArgument("--recompute must be a share from 0 to 1");
  }
  EngineOptions o = model.ToEngineOptions();
  if (o.batch_size == 0) o.batch_size = EngineOptions().batch_size;  // 512, as always here
  o.cache_dir = cache_dir;
  o.cache_redis = modular.cache_redis;
  o.parallel = 1;
  o.module_positions = mode;
  o.module_shared_moves = modular.moved_keys == "shared";
  o.module_recompute = modular.recompute;
  PC_ASSIGN_OR_RETURN(o.chat_template, model.ChatTemplateText());
  return Engine::Create(o);
}

std::string DefaultSchemaModel() {
  namespace fs = std::filesystem;
  // The binary lives in REPO/BUILD/promptcache; the shared models sit beside the repository.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path p =
        exe.parent_path().parent_path().parent_path() / "shared" / "models" / "stories260K.gguf";
    if (fs::exists(p, ec)) return p.lexically_normal().string();
  }
#ifdef PC_DEFAULT_SHARED_DIR
  return std::string(PC_DEFAULT_SHARED_DIR) + "/models/stories260K.gguf";
#else
  return "../shared/models/stories260K.gguf";
#endif
}

namespace {

void PrintLayout(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  if (!text.empty() && text.back() != '\n') std::fputc('\n', stdout);
}

class SchemaCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    sub->require_subcommand(1);
    load_ = sub->add_subcommand("load", "encode a schema's modules into the cache (and persist)");
    load_->add_option("file", load_file_, "PML schema file")->required();
    model_.Register(load_);
    model_.RegisterChatTemplate(load_);
    modular_.Register(load_);
    modular_.RegisterRedis(load_);
    load_->add_option("--cache-dir", cache_dir_,
                      "keep the modules (disk tier) and the schema here, for `prompt` and `serve`");
    show_ = sub->add_subcommand("show", "print a schema's layout: ranges, token counts, spans");
    show_->add_option("file", show_file_, "PML schema file")->required();
    show_->add_option("-m,--model", show_model_,
                      "model whose tokenizer counts the tokens (default: "
                      "../shared/models/stories260K.gguf beside the repository)");
    show_->add_option("--chat-template", show_template_,
                      "Jinja chat template file to use instead of the model's "
                      "tokenizer.chat_template");
  }

  int Execute() override { return load_->parsed() ? Load() : Show(); }

 private:
  int Load() {
    Result<std::unique_ptr<Engine>> engine = MakeEngine(model_, cache_dir_, modular_);
    if (!engine.ok()) return Fail(engine.status());
    std::unique_ptr<ProgressBar> bar;
    SchemaLoadOptions o;
    o.on_progress = [&](int done, int total) {
      if (!bar) bar = std::make_unique<ProgressBar>("encoding modules", total);
      bar->Update(done);
    };
    Result<SchemaInfo> info = (*engine)->LoadSchemaFile(load_file_, o);
    bar.reset();
    if (!info.ok()) return Fail(info.status());
    PrintLayout(info->layout);
    std::printf("cached: %d tokens in %d of %d modules plus the always-included text\n",
                info->cached_tokens, info->cached_modules, info->modules);
    std::printf("encoded %d tokens in %.1f ms; %d tokens were cached already\n",
                info->encoded_tokens, info->encode_ms, info->reused_tokens);
    if (info->persisted) {
      std::printf("persisted in %s/schemas/%s (modules in the disk tier)\n", cache_dir_.c_str(),
                  info->name.c_str());
    } else {
      std::printf("not persisted: without --cache-dir the modules live only in this process\n");
    }
    return 0;
  }

  int Show() {
    const std::string path = show_model_.empty() ? DefaultSchemaModel() : show_model_;
    Result<std::string> chat_template = ReadChatTemplateFile(show_template_);
    if (!chat_template.ok()) return Fail(chat_template.status());
    std::unique_ptr<Model> model = LoadModelOrReport(path, /*pack=*/false);  // tokenizer only
    if (!model) return 1;
    if (!chat_template->empty()) model->set_chat_template(*chat_template);
    ModelPmlEncoder encoder(*model, 0);
    Result<SchemaLayout> layout = LoadSchema(show_file_, encoder);
    if (!layout.ok()) return Fail(layout.status());
    std::printf("tokenizer: %s\n", path.c_str());
    PrintLayout(FormatLayout(*layout));
    return 0;
  }

  CLI::App* load_ = nullptr;
  CLI::App* show_ = nullptr;
  ModularOptions modular_;
  ModelOptions model_;
  std::string load_file_, show_file_, cache_dir_, show_model_, show_template_;
};

}  // namespace

std::unique_ptr<Command> MakeSchemaCommand() { return std::make_unique<SchemaCommand>(); }

}  // namespace promptcache::cli
