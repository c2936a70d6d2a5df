#include "sampling/decode_step.h"

#include "core/enum_names.h"

namespace promptcache {

// kNone has no name: "".
constexpr EnumName<DecodeEnd> kFinishReasons[] = {{DecodeEnd::kStop, "stop"},
                                                  {DecodeEnd::kLength, "length"},
                                                  {DecodeEnd::kCancelled, "cancelled"}};
static_assert(NamesEach(kFinishReasons, DecodeEnd::kStop, DecodeEnd::kCancelled));

const char* FinishReason(DecodeEnd end) { return NameOf(kFinishReasons, end, ""); }

DecodeStep::DecodeStep(const Tokenizer& tok, const SamplingParams& sampling, DecodeOptions options)
    : tok_(tok),
      options_(std::move(options)),
      sampler_(sampling),
      stream_(tok, options_.stop, options_.special_text) {}

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
