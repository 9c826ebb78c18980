// DecodeStream: the rules of one decode leg, without its I/O.
//
// A decode leg claims its handoff, validates it (B3), connects, sends the
// decode request, reads the response head and then the SSE stream, hands
// every event to the DecodeObserver, flushes to the client between reads,
// and ends either with generated output and [DONE] (its connection may be
// pooled) or with one classified failure. This class holds every decision
// of that leg: what refuses it before any request, which deadline bounds
// each stage (connect, first token B12, the silence between SSE units B13,
// the request deadline) and how a slow client's flush pauses it, what each
// byte of the stream means, and which failure an abnormal end is. The I/O
// loop (BeastEngineClient::Decode) moves bytes and applies its answers; unit
// tests drive it with bytes and times alone (tests/engines/http/
// decode_stream_test.cc).
//
// Not thread-safe: one leg, one loop.
#ifndef NARWHAL_ENGINES_HTTP_DECODE_STREAM_H_
#define NARWHAL_ENGINES_HTTP_DECODE_STREAM_H_

#include <optional>
#include <string>
#include <string_view>

#include "engines/clock.h"
#include "engines/engine_client.h"
#include "engines/http/http_options.h"
#include "engines/http/leg_timer.h"
#include "engines/http/sse_reader.h"
#include "engines/stream_event.h"

namespace narwhal::engines {

// The bound a leg's timer should enforce next.
struct LegAlarm {
  MonoTime at = MonoTime::max();
  LegBound bound = LegBound::kNone;
  bool operator==(const LegAlarm&) const = default;
};

// How the transport ended, as the I/O loop saw it: what DecodeStream cannot
// see from the bytes alone.
struct DecodeLegEnd {
  bool cancelled = false;                // the client went away (the cancel token fired)
  LegBound timed_out = LegBound::kNone;  // the bound that expired, kNone if none
  // Why the head came too late: more interim (1xx) heads than the adapter
  // skips, or "".
  std::string interim_bound;
  // Why the read stopped at a response bound (headers, framing), or "".
  std::string response_bound;
  // The failure to report when no response status arrived (connect failed,
  // connection lost); the loop words it from its socket error.
  std::optional<EngineFailure> transport;
  std::string connection_key;  // "host:port", for the connect timeout's words
};

class DecodeStream {
 public:
  // Why the leg must not start, checked before any I/O in this order: a
  // handoff already used (the caller's mistake: no evidence), one that fails
  // B3 (evidence against its producer), a bad engine URL, a cancelled
  // request, a passed request deadline. Claims the handoff. On success sets
  // *host and *port from the consumer's URL.
  static std::optional<DecodeOutcome> Refuse(const EngineTarget& consumer,
                                             const PrefillResult& handoff,
                                             const HttpEngineClientOptions& opts,
                                             const LegOptions& options, MonoTime now,
                                             std::string* host, int* port);

  // A leg that starts at `started` (the first-token budget starts here,
  // before connect) and ends by `request_deadline` at the latest.
  DecodeStream(const HttpEngineClientOptions& opts, const EngineTarget& consumer, MonoTime started,
               MonoTime request_deadline, DecodeObserver& observer);
  DecodeStream(const DecodeStream&) = delete;
  DecodeStream& operator=(const DecodeStream&) = delete;

  // Before connecting (at `now`): the connect timeout, or the first-token
  // bound when that comes first.
  LegAlarm Connecting(MonoTime now) const;
  // Connected: the first-token bound (B12) until the first token.
  LegAlarm Connected() const;
  void RequestSent() { request_sent_ = true; }
  // The final response head's status.
  void Head(int status) { status_ = status; }

  // Bytes of the response body read at `now`. A 200's bytes are SSE: each
  // complete event is classified and passed to the observer. Another
  // status's bytes are kept (bounded) as the engine's error text. Returns
  // false when reading must stop: [DONE], an in-stream error, a malformed
  // event, broken choice bounds, the observer stopping the leg, or a full
  // error body.
  bool Body(std::string_view bytes, MonoTime now);
  // The alarm to arm after Body() when it changed (B13 restarts with every
  // complete SSE unit after the first token), once.
  std::optional<LegAlarm> TakeAlarm();

  // The observer's flush to the client began at `now`: whether the leg's
  // timer pauses meanwhile (a slow client is not engine silence, B13).
  bool FlushStarted(MonoTime now);
  // The flush ended at `now` with the observer's answer: the alarm to arm
  // again (the engine's silence resumes where the client's pause began), or
  // none when the observer stopped the leg (reading stops).
  std::optional<LegAlarm> FlushEnded(MonoTime now, bool keep_going);
  // The observer declined more events (its OnEvent or Flush said stop).
  void ObserverStopped() { observer_stopped_ = true; }

  // Generated output, then [DONE], and the observer took all of it: the leg
  // succeeded and its connection may go back to the pool.
  bool Succeeded() const { return done_ && first_token_ && !observer_stopped_; }
  bool observer_stopped() const { return observer_stopped_; }
  int status() const { return status_; }

  // The leg's outcome: success, or the one failure its end means (the
  // failure ladder), with whether the handoff stayed with its producer.
  DecodeOutcome Finish(DecodeLegEnd end);

 private:
  bool OnEvent(std::string_view payload);
  LegAlarm ReadAlarm() const;
  void RestartReadTimer(MonoTime now);

  const HttpEngineClientOptions& opts_;
  const EngineTarget& consumer_;
  DecodeObserver& observer_;
  const MonoTime request_deadline_;
  const MonoTime first_token_deadline_;
  const LegBound first_token_bound_;
  const MonoClock::duration read_timeout_;

  SseReader sse_;
  const SseReader::EventFn on_event_;
  StreamEvent event_;
  bool first_token_ = false;
  bool done_ = false;
  bool observer_stopped_ = false;
  bool request_sent_ = false;
  int status_ = 0;
  int metadata_frames_ = 0;  // before the first token
  std::optional<EngineFailure> stream_error_;
  std::string choice_bound_;     // why a chunk broke the choice bounds
  std::string malformed_event_;  // why an event could not be read
  std::string error_body_;       // a non-200 answer's body, bounded
  // B13 bounds the silence between complete SSE units — a `data:` event,
  // metadata included, or a comment line (a keep-alive) — not between
  // transport reads: bytes of an event that never ends do not reset it.
  MonoTime silent_since_{};  // end of the last complete unit (after the first token)
  MonoTime flush_started_{};
  MonoTime now_{};  // of the Body() call in progress
  std::optional<LegAlarm> pending_alarm_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_DECODE_STREAM_H_
