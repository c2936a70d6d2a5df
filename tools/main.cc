// promptcache: the command-line front end. Each subcommand lives in its own cmd_*.cc file.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "promptcache/version.h"
#include "tools/cli_common.h"

namespace {

using promptcache::cli::Command;
using promptcache::cli::Fail;

struct Entry {
  const char* name;
  const char* help;
  std::unique_ptr<Command> cmd;
  CLI::App* sub = nullptr;
};

// Every subcommand, in --help's order.
std::vector<Entry> Commands() {
  using namespace promptcache::cli;
  std::vector<Entry> commands;
  commands.push_back({"run", "generate a continuation of a prompt", MakeRunCommand()});
  commands.push_back({"tokenize", "print the token ids of a text", MakeTokenizeCommand()});
  commands.push_back({"vocab", "convert a Hugging Face tokenizer.json into a vocabulary GGUF",
                      MakeVocabCommand()});
  commands.push_back(
      {"bench", "measure prompt processing and generation speed", MakeBenchCommand()});
  commands.push_back(
      {"synth", "write a model of a real shape with random weights", MakeSynthCommand()});
  commands.push_back({"inspect", "describe a GGUF model", MakeInspectCommand()});
  commands.push_back(
      {"logits", "write the logits of token ids evaluated in one batch", MakeLogitsCommand()});
  commands.push_back({"embed", "print the embeddings of texts (pooled final hidden states) as JSON",
                      MakeEmbedCommand()});
  commands.push_back({"quantize",
                      "rewrite a GGUF model in a quantized file type (Q4_K_M, Q8_0, ...)",
                      MakeQuantizeCommand()});
  commands.push_back(
      {"serve", "serve an OpenAI-compatible HTTP API with prefix caching", MakeServeCommand()});
  commands.push_back(
      {"schema", "load (encode) or show a PML schema of prompt modules", MakeSchemaCommand()});
  commands.push_back(
      {"prompt", "serve PML prompts from cached prompt modules", MakePromptCommand()});
  commands.push_back({"eval-modules", "compare modular prompts with their full recompute",
                      MakeEvalModulesCommand()});
  commands.push_back({"eval-segments",
                      "measure the segment cache on a retrieval workload: fidelity, hits, time",
                      MakeEvalSegmentsCommand()});
  commands.push_back({"eval-kv",
                      "compare a quantized KV cache's next-token distributions with f16's",
                      MakeEvalKvCommand()});
  return commands;
}

// Parses the command line; an exit code when that ends the program (help, version, a bad
// flag), else nullopt.
std::optional<int> Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    // A Success like --help's: caught before the generic one, which prints nothing.
    std::printf("%s\n", e.what());
    return 0;
  } catch (const CLI::Success&) {
    return 0;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return Fail(std::string(e.what()) + " (see --help)");
  }
  return std::nullopt;
}

// Runs the command that was parsed. An exception that escapes it (an allocation failure, a
// library's) is one line and exit 1 like any other error, not an abort.
int RunParsed(std::vector<Entry>& commands) {
  for (Entry& e : commands) {
    if (!e.sub->parsed()) continue;
    try {
      return e.cmd->Execute();
    } catch (const std::bad_alloc&) {
      return Fail("out of memory");
    } catch (const std::exception& ex) {
      return Fail(std::string("internal error: ") + ex.what());
    }
  }
  return Fail("no command given (see --help)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "promptcache: an LLM inference engine that never computes the same attention state twice"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "promptcache " PROMPTCACHE_VERSION_STRING);
  std::vector<Entry> commands = Commands();
  for (Entry& e : commands) {
    e.sub = app.add_subcommand(e.name, e.help);
    e.cmd->Register(e.sub);
  }
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const Entry& e : commands) known = known || std::string(argv[1]) == e.name;
    if (!known) return Fail("unknown command '" + std::string(argv[1]) + "' (see --help)");
  }
  if (std::optional<int> code = Parse(app, argc, argv)) return *code;
  return RunParsed(commands);
}
