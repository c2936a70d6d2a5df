// POST /tokenize and /detokenize: a prompt (text, tokens or chat messages, as the cache routes
// read it) to token ids, and token ids back to text.
#include "model/model.h"
#include "server/json_fields.h"
#include "server/routes.h"

namespace promptcache {

using ojson = nlohmann::ordered_json;

void HandleTokenize(Call& call) {
  PrefixRequest r;
  BuiltPrompt p;
  if (!ReadPrefix(call, &r, &p)) return;
  call.SendJson(
      ojson{{"tokens", p.tokens}, {"count", p.tokens.size()}, {"pin_tokens", p.pin_tokens}});
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
