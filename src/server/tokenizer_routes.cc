// POST /tokenize and /detokenize: a prompt (text, tokens or chat messages, as the cache routes
// read it) to token ids, and token ids back to text.
#include "model/model.h"
#include "server/json_fields.h"
#include "server/routes.h"

namespace promptcache {

using ojson = nlohmann::ordered_json;

namespace {

bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

void HandleTokenize(Call& call) {
  PrefixRequest r;
  BuiltPrompt p;
  if (!ReadPrefix(call, &r, &p)) return;
  const Tokenizer& tok = call.engine().model().tokenizer();
  // A text prompt's BOS is the one special token the encoder adds; a chat template writes its
  // own, and token ids are taken as given.
  if (!r.add_special && r.messages.empty() && !r.prompt_is_tokens && !p.tokens.empty() &&
      tok.adds_bos() && p.tokens[0] == tok.bos()) {
    p.tokens.erase(p.tokens.begin());
  }
  ojson tokens = ojson::array();
  for (int32_t id : p.tokens) {
    if (!r.with_pieces) {
      tokens.push_back(id);
      continue;
    }
    // llama.cpp's shape: the piece as a string, or its bytes when they are not UTF-8 alone.
    const std::string piece = tok.TokenBytes(id, /*special=*/true);
    ojson bytes = ojson::array();
    for (unsigned char c : piece) bytes.push_back(int(c));
    tokens.push_back({{"id", id}, {"piece", ValidUtf8(piece) ? ojson(piece) : bytes}});
  }
  call.SendJson(ojson{
      {"tokens", std::move(tokens)}, {"count", p.tokens.size()}, {"pin_tokens", p.pin_tokens}});
}

void HandleDetokenize(Call& call) {
  PrefixRequest r;  // {"tokens": [ids]}
  std::optional<ApiError> err = ParsePrefixRequest(call.req.body, &r);
  if (!err && !r.prompt_is_tokens) {
    err = ApiError::BadRequest("'tokens' must be an array of token ids", "tokens");
  }
  if (err) return call.Fail(*err);
  Result<std::vector<int32_t>> ids = call.server.encoder().FromPrompt("", r.prompt_tokens, true);
  if (!ids.ok()) return call.Fail(ids.status(), "tokens");
  call.SendJson(ojson{{"content", call.engine().model().tokenizer().Decode(*ids)}});
}

}  // namespace promptcache
