// The Responses API's memory (server-internal): each stored response's conversation (the chat
// messages it rendered, its output included) and its response object, so that a request with
// `previous_response_id` renders the earlier turns again (their tokens are then a cached prefix,
// computed once), GET /v1/responses/{id} and its /input_items answer, and DELETE forgets it.
// Bounded by a count and by the bytes of the stored JSON; the least recently used response goes
// first. In memory only: a restart forgets.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace promptcache {

class ResponseStore {
 public:
  ResponseStore(size_t max_count, size_t max_bytes)
      : max_count_(max_count), max_bytes_(max_bytes) {}

  struct Entry {
    nlohmann::ordered_json messages;  // the conversation up to and including its output
    nlohmann::ordered_json response;  // the response object as sent
    std::string tenant;               // only its tenant may read it
    // The request's input as Responses items, each with an id (GET .../input_items).
    nlohmann::ordered_json input_items = nlohmann::ordered_json::array();
  };
  // Stores (or replaces) `id`; a response larger than the byte bound is not kept.
  void Put(const std::string& id, Entry entry);
  // The entry (and marks it recently used); nullopt when unknown, evicted or another tenant's.
  std::optional<Entry> Get(const std::string& id, const std::string& tenant);
  // Forgets `id`; false when unknown, evicted or another tenant's (which it leaves alone).
  bool Erase(const std::string& id, const std::string& tenant);
  size_t size() const;

 private:
  struct Slot {
    Entry entry;
    size_t bytes = 0;
    std::list<std::string>::iterator lru;
  };
  const size_t max_count_, max_bytes_;
  mutable std::mutex mu_;
  std::list<std::string> lru_;  // most recent first
  std::unordered_map<std::string, Slot> slots_;
  size_t bytes_ = 0;
};

}  // namespace promptcache
