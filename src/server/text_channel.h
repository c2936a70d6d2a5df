// The hand-off of one streaming request's text from the engine thread to the HTTP handler
// thread that writes it to the client.
//
// The engine calls CompletionRequest::on_text on its own thread, between batched forward passes
// of every active request; it must never wait on a slow or vanished client. Push only appends
// to a queue under a mutex and returns at once; the handler thread waits on the condition
// variable and does the network writes. When the handler finds the client gone it cancels the
// channel, and the next Push returns false, which tells the engine to stop the request.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "promptcache/engine.h"

namespace promptcache {

class TextChannel {
 public:
  // Engine thread: queues a piece of text. False once cancelled (the request should stop).
  bool Push(const std::string& piece);
  // The same for a piece of any choice, with its tokens' log-probabilities.
  bool Push(TextPiece piece);
  // The request is over (after its last Push): hands over its result.
  void Finish(CompletionResult result);
  // Reader side: stop the writer (the client disconnected or the server is stopping).
  void Cancel();
  bool cancelled() const;

  enum class Event {
    kText,      // *pieces holds every piece queued so far, oldest first
    kFinished,  // no text is left and *result holds the result
    kTimeout,   // nothing arrived within the timeout
  };
  // Waits up to `timeout` for text or the end. Text queued before Finish always comes first.
  Event Next(std::chrono::milliseconds timeout, std::vector<std::string>* pieces,
             CompletionResult* result);
  Event Next(std::chrono::milliseconds timeout, std::vector<TextPiece>* pieces,
             CompletionResult* result);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TextPiece> pieces_;
  std::optional<CompletionResult> result_;
  bool cancelled_ = false;
};

}  // namespace promptcache
