// Embeddings (Engine::SubmitEmbedding, Embed): how an input's final hidden states are pooled
// into a vector (Pooling), the request of token-id inputs, the handle to wait for or cancel it,
// and the result: one vector per input (one per token without pooling).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "promptcache/status.h"

namespace promptcache {

// How an embedding is made of an input's final hidden states (the model's last layer, after its
// final norm, before the output matrix): llama.cpp's pooling types, with the numbers its GGUF
// key `{arch}.pooling_type` uses. kDefault: EngineOptions::pooling, and there the model file's
// key, else kMean.
enum class Pooling {
  kDefault = -1,
  kNone = 0,  // no pooling: one vector per input token
  kMean = 1,  // the mean over the input's tokens (BOS and EOS included when the input has them)
  kCls = 2,   // the first token's
  kLast = 3,  // the last token's
};
// "mean", "last", "cls", "none" (and "default"); ParsePooling refuses other names, listing these.
std::string PoolingName(Pooling pooling);
Result<Pooling> ParsePooling(std::string_view name);

// The most inputs one embedding request may carry (OpenAI's limit).
inline constexpr int kMaxEmbeddingInputs = 2048;

// One request to Engine::SubmitEmbedding (or Embed): inputs of token ids, each embedded on its
// own (its tokens attend only to each other), all computed in the same forward passes.
//
// Inputs are token ids as the caller made them: TokenizeForEmbedding (promptcache/text.h) adds
// BOS and EOS as the model file says, as llama.cpp does. Each input must be non-empty and at
// most the context size; with kNone, all inputs together at most the context size (one vector
// per token is what comes back).
//
// Embeddings never use the prefix cache, nor add to it: a cached prefix holds each layer's K/V,
// not the last layer's hidden states (nor are they kept anywhere), so every token of an input
// is computed, and what an embedding computes is dropped once it is pooled.
struct EmbeddingRequest {
  std::vector<std::vector<int32_t>> inputs;
  Pooling pooling = Pooling::kDefault;  // kDefault: EngineOptions::pooling
  // Divide each vector by its Euclidean (L2) norm, as llama.cpp's llama-embedding and
  // llama-server do by default; false: the pooled hidden state as it is.
  bool normalize = true;
  // The length of the vectors asked for: 0 or the model's n_embd. Any other value (OpenAI's
  // `dimensions`, a truncation only models trained for it support) is refused with
  // InvalidArgument naming it: promptcache does not shorten embeddings.
  int dimensions = 0;
};

// What an embedding request gives back.
struct EmbeddingResult {
  // Not OK: the request failed or was refused, with the reason. A request cancelled (its
  // handle's Cancel) has an OK status, `cancelled` set and no embeddings.
  Status status;
  bool cancelled = false;
  Pooling pooling = Pooling::kMean;  // the pooling used (never kDefault)
  bool normalized = true;
  int dimensions = 0;  // floats per vector: the model's n_embd
  // One entry per input, in order: pooled, one vector of `dimensions` floats; with kNone, the
  // input's tokens' vectors one after another (tokens × dimensions floats).
  std::vector<std::vector<float>> embeddings;
  int prompt_tokens = 0;  // every input's tokens, all computed (usage: prompt and total tokens)
  double queue_ms = 0;    // waiting for the engine to take it
  double compute_ms = 0;  // from then until the last vector was made
};

// A submitted embedding request: wait for it, or cancel it (as RequestHandle).
class EmbeddingHandle {
 public:
  virtual ~EmbeddingHandle() = default;
  virtual EmbeddingResult Wait() = 0;
  virtual bool WaitFor(double seconds) = 0;
  virtual void Cancel() = 0;
};

}  // namespace promptcache
