#include "sampling/decode_step.h"

namespace promptcache {

const char* FinishReason(DecodeEnd end) {
  switch (end) {
    case DecodeEnd::kStop:
      return "stop";
    case DecodeEnd::kLength:
      return "length";
    case DecodeEnd::kCancelled:
      return "cancelled";
    case DecodeEnd::kNone:
      break;
  }
  return "";
}

DecodeStep::DecodeStep(const Tokenizer& tok, const SamplingParams& sampling, DecodeOptions options)
    : tok_(tok), options_(std::move(options)), sampler_(sampling), stream_(tok, options_.stop) {}

DecodeEnd DecodeStep::Take(const Token& token, const std::function<bool(const std::string&)>& emit,
                           const std::function<void(int32_t)>& on_token) {
  if (!token.forced && !options_.ignore_eos && tok_.IsEndOfGeneration(token.id)) {
    return DecodeEnd::kStop;
  }
  tokens_.push_back(token.id);
  if (on_token) on_token(token.id);
  bool stopped = false;
  const std::string piece = stream_.Push(token.id, &stopped);
  if (!piece.empty() && emit && !emit(piece)) return DecodeEnd::kCancelled;
  if (stopped || token.last) return DecodeEnd::kStop;
  if (Exhausted() || !token.room) return DecodeEnd::kLength;
  return DecodeEnd::kNone;
}

}  // namespace promptcache
