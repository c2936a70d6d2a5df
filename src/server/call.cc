#include "server/call.h"

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

// One streamed request: its engine handle, its channel, the thread that waits for its result
// (and ends the channel with it), and the writer. Destroyed when cpp-httplib releases the
// response, after the last write.
struct EventFeed {
  std::shared_ptr<RequestHandle> handle;
  std::shared_ptr<TextChannel> channel;
  std::function<bool(httplib::DataSink&)> write;
  std::thread waiter;
  uint64_t track_id = 0;

  ~EventFeed() {
    if (waiter.joinable()) waiter.join();
  }
};

}  // namespace

void Call::StreamEvents(std::shared_ptr<RequestHandle> handle, std::shared_ptr<TextChannel> channel,
                        std::function<bool(httplib::DataSink&)> write,
                        const char* content_type) {
  auto f = std::make_shared<EventFeed>();
  f->handle = std::move(handle);
  f->channel = std::move(channel);
  f->write = std::move(write);
  f->track_id = server.Track(f->handle);
  f->waiter = std::thread([h = f->handle, ch = f->channel] { ch->Finish(h->Wait()); });
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
        // The client went away (or the server is stopping): free the sequence at once.
        if (!success) {
          f->channel->Cancel();
          f->handle->Cancel();
        }
        s->Untrack(f->track_id);
      });
}

std::function<bool(const std::string&)> Call::StopsWithServer() const {
  const ServerContext* s = &server;
  return [s](const std::string&) { return !s->stopping(); };
}

}  // namespace promptcache
