#include "server/response_store.h"

namespace promptcache {

void ResponseStore::Put(const std::string& id, Entry entry) {
  const size_t bytes = entry.messages.dump().size() + entry.response.dump().size() +
                       entry.input_items.dump().size() + id.size();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = slots_.find(id); it != slots_.end()) {
    bytes_ -= it->second.bytes;
    lru_.erase(it->second.lru);
    slots_.erase(it);
  }
  if (bytes > max_bytes_ || max_count_ == 0) return;
  while (!lru_.empty() && (slots_.size() >= max_count_ || bytes_ + bytes > max_bytes_)) {
    auto old = slots_.find(lru_.back());
    bytes_ -= old->second.bytes;
    slots_.erase(old);
    lru_.pop_back();
  }
  lru_.push_front(id);
  slots_[id] = Slot{std::move(entry), bytes, lru_.begin()};
  bytes_ += bytes;
}

std::optional<ResponseStore::Entry> ResponseStore::Get(const std::string& id,
                                                       const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(id);
  if (it == slots_.end() || it->second.entry.tenant != tenant) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.entry;
}

bool ResponseStore::Erase(const std::string& id, const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(id);
  if (it == slots_.end() || it->second.entry.tenant != tenant) return false;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  slots_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_.size();
}

}  // namespace promptcache
