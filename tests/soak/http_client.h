// The soak's HTTP client: one request per connection over a plain loopback
// socket, read to the end of its framing (chunked or Content-Length), with
// an optional abort at a chosen moment (the socket is closed, whatever has
// arrived) and a hard bound on the whole exchange.
#ifndef NARWHAL_TESTS_SOAK_HTTP_CLIENT_H_
#define NARWHAL_TESTS_SOAK_HTTP_CLIENT_H_

#include "absl/time/time.h"
#include "tests/soak/request_record.h"

namespace narwhal::soak {

// Sends record->plan to 127.0.0.1:port and fills in what the client saw.
void RunHttpRequest(int port, absl::Duration hard_timeout, RequestRecord* record);

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_HTTP_CLIENT_H_
