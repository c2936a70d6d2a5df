#include "server/call.h"

#include <random>
#include <thread>

#include "core/log.h"
#include "server/json_fields.h"
#include "server/tenants.h"

namespace promptcache {

std::string Call::Namespace(const std::string& salt) const {
  return CacheNamespace(server.options().cache_secret, tenant_, salt);
}

std::string Call::PathParam(size_t i) const {
  return req.matches.size() > i ? req.matches[i].str() : std::string();
}

void Call::Send(std::string body, const std::string& content_type, int status) {
  res.status = status;
  res.set_content(std::move(body), content_type);
}

void Call::SendJson(const nlohmann::ordered_json& body, int status) {
  Send(Dump(body), "application/json", status);
}

void Call::Fail(const ApiError& error) {
  if (error.http_status == 503) res.set_header("Retry-After", "1");
  Send(ErrorBody(flavour, error), "application/json", error.http_status);
}

CompletionResult Call::Await(const std::shared_ptr<RequestHandle>& handle) {
  const uint64_t id = server.Track(handle);
  bool cancelled = false;
  while (!handle->WaitFor(0.1)) {
    if (!cancelled && (server.stopping() || RequestClientGone())) {
      handle->Cancel();
      cancelled = true;
    }
  }
  server.Untrack(id);
  return handle->Wait();
}

namespace {

// One streamed response: its engine handles (one, or a batch's), its channel, the thread that
// waits for their results (and ends the channel with them), and the writer. Destroyed when
// cpp-httplib releases the response, after the last write.
struct EventFeed {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::shared_ptr<TextChannel> channel;
  std::function<bool(httplib::DataSink&)> write;
  std::thread waiter;
  std::vector<uint64_t> track_ids;

  ~EventFeed() {
    if (waiter.joinable()) waiter.join();
  }
};

// The results of `handles`, in order; the first that fails cancels those after it.
std::vector<CompletionResult> WaitAll(const std::vector<std::shared_ptr<RequestHandle>>& handles) {
  std::vector<CompletionResult> results;
  bool failed = false;
  for (const auto& h : handles) {
    if (failed) h->Cancel();
    results.push_back(h->Wait());
    failed = failed || !results.back().status.ok();
  }
  return results;
}

// Answers `res` with the feed's events.
void StartFeed(ServerContext& server, httplib::Response& res, std::shared_ptr<EventFeed> f,
               const char* content_type) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // The server context outlives every response: the server waits for its connections.
  ServerContext* s = &server;
  res.set_chunked_content_provider(
      content_type,
      [f](size_t, httplib::DataSink& sink) {
        try {
          return f->write(sink);
        } catch (const std::exception& e) {  // nothing may escape into cpp-httplib's writer
          PC_LOG_ERROR("server: stream failed: %s", e.what());
          return false;
        }
      },
      [s, f](bool success) {
        // The client went away (or the server is stopping): free the sequences at once.
        if (!success) {
          f->channel->Cancel();
          for (const auto& h : f->handles) h->Cancel();
        }
        for (const uint64_t id : f->track_ids) s->Untrack(id);
      });
}

}  // namespace

void Call::StreamEvents(std::shared_ptr<RequestHandle> handle, std::shared_ptr<TextChannel> channel,
                        std::function<bool(httplib::DataSink&)> write, const char* content_type) {
  auto f = std::make_shared<EventFeed>();
  f->handles.push_back(std::move(handle));
  f->channel = std::move(channel);
  f->write = std::move(write);
  f->track_ids.push_back(server.Track(f->handles[0]));
  f->waiter = std::thread([h = f->handles[0], ch = f->channel] { ch->Finish(h->Wait()); });
  StartFeed(server, res, f, content_type);
}

void Call::StreamEvents(std::vector<std::shared_ptr<RequestHandle>> handles,
                        std::shared_ptr<TextChannel> channel,
                        std::function<bool(httplib::DataSink&)> write, MergeResults merge) {
  auto f = std::make_shared<EventFeed>();
  f->handles = std::move(handles);
  f->channel = std::move(channel);
  f->write = std::move(write);
  for (const auto& h : f->handles) f->track_ids.push_back(server.Track(h));
  f->waiter = std::thread([hs = f->handles, ch = f->channel, merge = std::move(merge)] {
    ch->Finish(merge(WaitAll(hs)));
  });
  StartFeed(server, res, f, "text/event-stream");
}

void Call::StreamEvents(std::shared_ptr<RequestHandle> handle, std::shared_ptr<TextChannel> channel,
                        std::function<bool(httplib::DataSink&)> write, NextRequest next,
                        JoinResults join) {
  auto f = std::make_shared<EventFeed>();
  f->handles.push_back(std::move(handle));
  f->channel = std::move(channel);
  f->write = std::move(write);
  f->track_ids.push_back(server.Track(f->handles[0]));
  f->waiter = std::thread(
      [h = f->handles[0], ch = f->channel, next = std::move(next), join = std::move(join)] {
        CompletionResult first = h->Wait();
        std::shared_ptr<RequestHandle> second;
        if (first.status.ok() && !ch->cancelled()) second = next(first);
        if (!second) return ch->Finish(std::move(first));
        ch->Finish(join(std::move(first), second->Wait()));
      });
  StartFeed(server, res, f, "text/event-stream");
}

std::string RandomHex(int n) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < n; ++i) s += kHex[rng() & 15];
  return s;
}

bool WriteStreamPart(httplib::DataSink& sink, const std::string& out, bool last) {
  if (!out.empty() && !sink.write(out.data(), out.size())) return false;
  if (last) sink.done();
  return true;
}

std::function<bool(const std::string&)> Call::StopsWithServer() const {
  const ServerContext* s = &server;
  return [s](const std::string&) { return !s->stopping(); };
}

}  // namespace promptcache
