// embed: the smallest useful program on promptcache's public API, built against the installed
// library only (CMakeLists.txt here, or pkg-config: docs/library.md).
//
//   embed MODEL.gguf PROMPT [TOKENS]   greedy continuation of PROMPT on stdout
//   embed --version                    the library's version
//
// It runs the prompt twice through one Engine: the second request reuses the first one's cached
// prefix (reported on stderr) and must continue it the same way.
#include <promptcache/promptcache.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

namespace pc = promptcache;

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "embed: %s\n", message.c_str());
  return 1;
}

// One greedy completion of `prompt`, waited for.
pc::Result<pc::CompletionResult> Complete(pc::Engine& engine, const std::string& prompt,
                                          int max_tokens) {
  pc::CompletionRequest request;
  request.prompt = pc::Tokenize(engine, prompt);
  request.max_tokens = max_tokens;
  request.sampling.temperature = 0;  // greedy: the same text on every run
  PC_ASSIGN_OR_RETURN(std::shared_ptr<pc::RequestHandle> handle, engine.Submit(std::move(request)));
  pc::CompletionResult result = handle->Wait();
  if (!result.status.ok()) return result.status;
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("%s\n", PROMPTCACHE_VERSION_STRING);
    return 0;
  }
  if (argc < 3 || argc > 4) return Fail("usage: embed MODEL.gguf PROMPT [TOKENS] | --version");
  const int max_tokens = argc == 4 ? std::atoi(argv[3]) : 32;
  if (max_tokens <= 0) return Fail("TOKENS must be a positive number");

  pc::EngineOptions options;
  options.model_path = argv[1];
  options.parallel = 1;
  pc::Result<std::unique_ptr<pc::Engine>> engine = pc::Engine::Create(options);
  if (!engine.ok()) return Fail(engine.status().message());
  const pc::ModelInfo info = pc::GetModelInfo(**engine);
  std::fprintf(stderr, "embed: promptcache %s, model %s (%s), %d tokens of context\n",
               PROMPTCACHE_VERSION_STRING, info.name.c_str(), info.architecture.c_str(),
               info.context_length);

  pc::Result<pc::CompletionResult> first = Complete(**engine, argv[2], max_tokens);
  if (!first.ok()) return Fail(first.status().message());
  pc::Result<pc::CompletionResult> second = Complete(**engine, argv[2], max_tokens);
  if (!second.ok()) return Fail(second.status().message());
  std::fprintf(stderr, "embed: second run: %d of %d prompt tokens from the cache\n",
               second->cached_tokens, second->prompt_tokens);
  if (second->text != first->text) return Fail("the cached run continued differently");

  std::printf("%s\n", first->text.c_str());
  return 0;
}
