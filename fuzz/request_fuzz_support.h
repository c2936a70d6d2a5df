// What the request fuzzers (openai_fuzz, anthropic_fuzz, routes_fuzz) share: the vocabularies a
// parsed request is rendered with, loaded once from ../shared; checks that abort with the property
// violated (also those every error and every accepted chat or completions request must pass); and
// the splicing that reaches deep into a parser without committed seeds (each input is tried
// as is, and written over one of a few valid bodies: the first byte picks the body, the second
// where the rest of the input goes).
#pragma once

#include <errno.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "gguf/gguf.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/prompt_encoder.h"
#include "tokenizer/tokenizer.h"

namespace promptcache::fuzzing {

struct Vocab {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<PromptEncoder> encoder;
};

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::abort();
}

inline void Check(bool ok, const char* what) {
  if (!ok) Die(std::string("violated: ") + what);
}

inline void CheckJson(const std::string& text, const char* what) {
  Check(nlohmann::json::accept(text), what);
}

// An error as a route sends it: a 4xx with a message, its body in `flavour`'s shape valid JSON.
inline void CheckApiError(const ApiError& e, ApiFlavour flavour) {
  Check(e.http_status >= 400 && e.http_status < 500, "a 4xx status");
  Check(!e.message.empty(), "an error message");
  CheckJson(ErrorBody(flavour, e), "error body is JSON");
}

// What an accepted chat or completions request (of the OpenAI routes, or one another API is
// translated into) satisfies: its kind, valid sampling parameters, max_tokens within
// 1..max_tokens_limit, at most 4 stop strings, and a chat with messages of the known roles.
inline void CheckAcceptedRequest(const ApiRequest& r, ApiKind kind, int max_tokens_limit) {
  Check(r.kind == kind, "kind");
  Check(r.sampling.Validate().ok(), "accepted sampling parameters are valid");
  Check(!r.max_tokens || (*r.max_tokens >= 1 && *r.max_tokens <= max_tokens_limit),
        "max_tokens range");
  Check(r.stop.size() <= 4, "at most 4 stop strings");
  Check(kind != ApiKind::kChat || !r.messages.empty(), "chat has messages");
  for (const ApiMessage& m : r.messages) {
    Check(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool",
          "known role");
  }
}

// A vocabulary of ../shared (PC_SHARED_DIR), with a prompt encoder for `chat_template`.
inline Vocab LoadOrDie(const std::string& relative, const std::string& chat_template) {
  const char* env = std::getenv("PC_SHARED_DIR");
  const std::string dir = env != nullptr && *env != '\0' ? env : PC_SHARED_DIR;
  auto file = GgufFile::Open(dir + "/" + relative);
  if (!file.ok()) Die(file.status().message() + " (set PC_SHARED_DIR)");
  Vocab v;
  v.file = std::move(file).value();
  auto tok = Tokenizer::FromGguf(*v.file);
  if (!tok.ok()) Die(tok.status().message());
  v.tok = std::move(tok).value();
  v.encoder = std::make_unique<PromptEncoder>(*v.tok, chat_template);
  return v;
}

// A ChatML template (the Llama-2 vocabulary has no template of its own).
constexpr const char* kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}";

// Runs `exercise` on the input, then on the input spliced into one of `bodies`.
template <size_t N, typename F>
void ExerciseAsIsAndSpliced(const uint8_t* data, size_t size, const char* const (&bodies)[N],
                            F&& exercise) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  exercise(input);
  if (size < 2) return;
  std::string spliced = bodies[data[0] % N];
  const size_t at = spliced.size() * data[1] / 256;
  spliced.replace(at, std::min(size - 2, spliced.size() - at), input.substr(2));
  exercise(std::string_view(spliced));
}

}  // namespace promptcache::fuzzing
