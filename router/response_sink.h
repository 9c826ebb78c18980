// ResponseSink: where the router core writes one client request's response.
//
// Each front door implements it for its transport: the HTTP door writes SSE
// events straight to the client's socket, the gRPC door queues Delta
// messages for its reactor. The router calls it on the request's event loop,
// in this order: any number of Event()/Flush() pairs (streaming clients, after
// the first generated token), then Drain() once after a successful stream,
// then Finish() exactly once. The door cancels cancel_token() when its client
// goes away (B19); the router then ends the request as cancelled.
//
// Back-pressure: Flush() completes only when the client's transport can take
// more, so a slow client pauses the engine read (B13) instead of growing
// memory. A sink buffers at most the events of one engine read plus a small
// bounded queue.
#ifndef NARWHAL_ROUTER_RESPONSE_SINK_H_
#define NARWHAL_ROUTER_RESPONSE_SINK_H_

#include <string_view>

#include "engines/cancel_token.h"
#include "engines/engine_client.h"
#include "engines/stream_event.h"
#include "router/outcome.h"

namespace narwhal::router {

class ResponseSink {
 public:
  virtual ~ResponseSink() = default;

  // One relayed decode event of a streaming request, in order: `data` is the
  // engine's payload bytes (relayed unchanged over HTTP), `event` its
  // classification. Valid during the call only. Never blocks.
  virtual void Event(std::string_view data, const engines::StreamEvent& event) = 0;

  // Hands the events since the last Flush to the client's transport in one
  // write. Completes once the transport can take more; false when the client
  // is gone or did not take them by `deadline` (the router then ends the
  // request).
  virtual engines::Awaitable<bool> Flush(engines::MonoTime deadline) = 0;

  // Completes once the client has taken everything sent so far (the router
  // counts a stream as completed only then); false as for Flush.
  virtual engines::Awaitable<bool> Drain(engines::MonoTime deadline) = 0;

  // The end of the request: the outcome (status, error, assembled body for
  // non-streaming requests). Exactly once, after the journal row is written.
  // Never blocks.
  virtual void Finish(Outcome outcome) = 0;

  // Fired by the door when the client goes away; any thread.
  engines::CancelToken& cancel_token() { return cancel_; }
  bool cancelled() const { return cancel_.cancelled(); }

 private:
  engines::CancelToken cancel_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_RESPONSE_SINK_H_
