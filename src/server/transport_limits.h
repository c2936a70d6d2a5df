// The bounds a server puts on its connections (enforced by server/http_transport.h): kept apart
// so that ServerOptions can name them without bringing in the HTTP library.
#pragma once

namespace promptcache {

struct TransportLimits {
  int max_connections = 512;
  // Connections one client address may hold at once (0: max_connections / 2), so that one client
  // cannot take every connection. Behind a reverse proxy every client has the proxy's address:
  // raise it to max_connections there.
  int max_connections_per_client = 0;
  double header_timeout_s = 10;  // request line and headers, in total
  double body_timeout_s = 60;    // the body, in total, from the end of the headers
  // A kept-alive connection waiting for its next request. Node's fetch (undici) fails a request
  // whose response has arrived but is not yet consumed when the connection closes, so this is
  // the common servers' 5 s (Node's, uvicorn's) rather than as short as idle threads would like.
  double idle_timeout_s = 5;
  double write_timeout_s = 30;  // each write (a client that stops reading a stream)
};

}  // namespace promptcache
