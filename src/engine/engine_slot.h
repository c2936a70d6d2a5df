// Internal to the engine (the files that implement engine_impl.h): a request as the engine
// thread holds it (its choices and result) and a slot (one sequence being served: a choice of a
// request), with the clock and cache-map helpers they share.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>

#include "engine/engine_impl.h"
#include "sampling/decode_step.h"

namespace promptcache {
namespace engine_internal {

using Clock = std::chrono::steady_clock;

inline double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Appends `length` tokens from `source` to a cache map's runs, merging with the last run.
inline void AddRun(std::vector<SourceRun>* runs, TokenSource source, int length) {
  if (length <= 0) return;
  if (!runs->empty() && runs->back().source == source) {
    runs->back().length += length;
  } else {
    runs->push_back({source, length});
  }
}

inline constexpr size_t kTtftWindow = 1024;  // recent TTFT samples kept for the metrics histogram

}  // namespace engine_internal

using engine_internal::AddRun;
using engine_internal::Clock;
using engine_internal::kTtftWindow;
using engine_internal::MsBetween;

// An embedding request (Engine::SubmitEmbedding): one slot serves all its inputs in order,
// several in one step while the batch has room. Each input is a sequence of its own, dropped
// once its vector is made (never cached: see EmbeddingRequest). After a step at most one input
// is part-way, the last one started.
struct EngineImpl::EmbeddingJob {
  struct Input {
    int index;       // into req.inputs
    int filled = 0;  // tokens fed to the model
    KvSequence seq;
    std::vector<double> sum;  // kMean: the hidden states so far, added in token order
    std::vector<float> rows;  // kNone: every token's hidden state; kCls, kLast: the one pooled
  };
  EmbeddingRequest req;
  Pooling pooling = Pooling::kMean;  // resolved
  int next = 0;                      // the first input not started
  std::deque<Input> live;            // started and not yet pooled
  EmbeddingResult result;            // filled as inputs finish
  bool answered = false;  // result is final (else the request's CompletionResult says why not)
};

struct EngineImpl::HiddenRow {
  EmbeddingJob* job;
  EmbeddingJob::Input* input;
  int token;  // index in the input
};

struct EngineImpl::Request : RequestHandle {
  CompletionRequest req;
  std::unique_ptr<Planned> modular;         // a PML prompt; null for token prompts
  std::unique_ptr<EmbeddingJob> embedding;  // an embedding request; `req` then holds nothing
  Clock::time_point submitted = Clock::now();
  std::atomic<bool> cancelled{false};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  CompletionResult result;
  // Engine thread: the choices, filled as their slots finish; choice 0's result carries the
  // request's timings. `open` counts the slots still running.
  std::vector<CompletionChoice> choices = std::vector<CompletionChoice>(1);
  CompletionResult base;
  Status failure;  // the first error of a forked choice
  int open = 1;
  bool forked = false;
  double grammar_ms = 0;                            // every choice's grammar work
  int draft_tokens = 0, accepted_draft_tokens = 0;  // every choice's (EngineOptions::draft_max)
  // The leading prompt tokens whose K/V are the full computation's: only those enter the prefix
  // cache (a reused segment, and all after it, are an approximation).
  int exact_prefix = std::numeric_limits<int>::max();
  // Its prefix and segment lookups' remote part, read off the engine thread
  // (EngineImpl::StartFetch): planned at intake, the values kept here (written under the
  // engine's mu_) until the request is admitted again, which takes them into the cache and drops
  // them.
  struct Fetch {
    // plans[0]: the prefix's; then one per segment it may look up, in order.
    std::vector<RemotePrefixFetch> plans;
    std::vector<std::vector<RemoteValue>> values;  // values[i]: plans[i]'s
    // Taken in a part per turn of the engine's loop (EngineImpl::AdoptSome): the next value is
    // values[plan][next]; the prefix's blocks taken in so far (their origin: remote).
    size_t plan = 0, next = 0;
    std::vector<BlockKey> adopted;
    Clock::time_point started;
    double ms = 0;  // from the plan to the values' return
  };
  std::unique_ptr<Fetch> fetch;

  CompletionResult Wait() override {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return result;
  }
  bool WaitFor(double seconds) override {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done; });
  }
  void Cancel() override { cancelled = true; }
};

struct EngineImpl::Slot {
  // Cached blocks to append to `seq` once `before` prefill tokens are computed.
  struct Gather {
    int before;
    KvSequence held;  // references keep the blocks from being evicted meanwhile
  };

  std::shared_ptr<Request> r;
  int choice = 0;  // index among the request's choices
  KvSequence seq;
  std::vector<int32_t> tokens;  // prompt (every included token, by position), then generated
  int n_prompt = 0;
  // Prefill: tokens computed after what was gathered, at their positions, in order.
  std::vector<int32_t> fill_tokens, fill_pos;
  int filled = 0;
  std::deque<Gather> gathers;
  int next_pos = 0;  // position of the next token fed after the prefill
  int pending = -1;  // sampled token not yet fed to the model
  // Speculative decoding (EngineImpl::AddDraft): the guesses fed after `pending` in this step,
  // their logits rows following its row; while those rows are handed out, the K/V the sequence
  // keeps should it finish (what decoding one token at a time would hold; -1: no guesses out).
  Drafter drafter;
  std::vector<int32_t> draft;
  int keep_kv = -1;
  DecodeStep decode;  // the choice's sampler, text stream and generated tokens
  CompletionResult result;
  Clock::time_point admitted, prefill_start, first_token;
  bool finished = false;
  size_t reserved = 0;  // K/V bytes held under kv_ram_bytes
  int released = 0;     // leading tokens whose sliding parts seq gave up (TrimSliding)
  std::vector<TokenLogprob> logprobs;             // generated tokens', when requested
  std::vector<TokenLogprob> unsent;               // of them, not yet passed to on_piece
  std::vector<uint64_t> prefix_hashes;            // of the prompt, for its log-probabilities
  std::unique_ptr<GrammarConstraint> constraint;  // the request's grammar, at this choice's text
  // Sampled for fidelity (EngineOptions::fidelity_sample): the logits of its first
  // kFidelitySampleSteps generated tokens.
  bool fidelity = false;
  bool fidelity_decided = false;  // Pick asked once per request, at its first logits
  std::vector<std::vector<float>> fidelity_logits;
  // Segments: those missed, stored once the prompt's K/V are complete (StoreSegments), each with
  // whether a partial copy of it must be replaced; and whether the slot reuses or stores
  // segments (its sliding parts are then released only after its prefill, as a modular one's).
  struct SegmentMiss {
    PromptSegment range;
    bool replace = false;
  };
  std::vector<SegmentMiss> segment_misses;
  bool segmented = false;
  // In-flight sharing of segments (segment_admission.cc): the id under which the slot claims
  // the misses it computes and will store (segment_claims_; 0: none), and while it waits for
  // segments other sequences are computing, their first keys and sizes (empty: not waiting;
  // waited and wait_limit below count its steps). A waiting slot has nothing planned: no
  // prefill tokens, no gathers, no claims, so nobody ever waits for a waiting slot (no cycles).
  struct AwaitedSegment {
    BlockKey key;
    int tokens = 0;
  };
  uint64_t segment_owner = 0;
  std::vector<AwaitedSegment> awaited_segments;
  // In-flight sharing of a plain prompt's prefix (prefix_sharing.cc, kv/in_flight.h), with the
  // prefix cache on: the sequence's id as a producer of blocks (0: it claims nothing), the chain
  // keys of the prompt's full blocks, and while it waits for another sequence to compute blocks
  // it matched, the index in `keys` of the last of them (-1: not waiting), the steps it waited
  // and the most it will. base_hit: the tokens of its first lookup that no running producer
  // computed (what it reuses beyond them was shared in flight); published: leading blocks it
  // has put in the cache. A prompt with segments (UsesSegments) waits as a plain prompt does but
  // claims and publishes only its exact prefix (Request::exact_prefix), once its segments are
  // planned: its K/V past its first reused segment are an approximation nobody should take.
  uint64_t owner = 0;
  std::vector<BlockKey> keys;
  int awaits = -1;
  int waited = 0, wait_limit = 0;
  int base_hit = -1;
  int published = 0;
  // The prompt's blocks that its remote fetch took into the cache (their origin: remote).
  std::vector<BlockKey> fetched;

  // Waiting for blocks or segments another sequence is computing: nothing to prefill yet.
  bool Waiting() const { return awaits >= 0 || !awaited_segments.empty(); }

  Slot(std::shared_ptr<Request> req, BlockPool* blocks, const Tokenizer& tok,
       const SamplingParams& sampling)
      : r(std::move(req)),
        seq(blocks),
        decode(tok, sampling,
               {r->req.max_tokens, r->req.stop, r->req.ignore_eos, r->req.special_text}) {}
};

}  // namespace promptcache
