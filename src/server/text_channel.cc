#include "server/text_channel.h"

namespace promptcache {

bool TextChannel::Push(const std::string& piece) { return Push(TextPiece{0, piece, {}}); }

bool TextChannel::Push(TextPiece piece) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return false;
    pieces_.push_back(std::move(piece));
  }
  cv_.notify_one();
  return true;
}

void TextChannel::Finish(CompletionResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    result_ = std::move(result);
  }
  cv_.notify_one();
}

void TextChannel::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
}

bool TextChannel::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

TextChannel::Event TextChannel::Next(std::chrono::milliseconds timeout,
                                     std::vector<std::string>* pieces, CompletionResult* result) {
  std::vector<TextPiece> all;
  const Event e = Next(timeout, &all, result);
  pieces->clear();
  for (TextPiece& p : all) pieces->push_back(std::move(p.text));
  return e;
}

TextChannel::Event TextChannel::Next(std::chrono::milliseconds timeout,
                                     std::vector<TextPiece>* pieces, CompletionResult* result) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !pieces_.empty() || result_.has_value(); });
  if (!pieces_.empty()) {
    pieces->clear();
    pieces->swap(pieces_);
    return Event::kText;
  }
  if (result_.has_value()) {
    *result = *result_;
    return Event::kFinished;
  }
  return Event::kTimeout;
}

}  // namespace promptcache
