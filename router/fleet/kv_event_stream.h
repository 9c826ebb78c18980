// KvEventStream: one engine's KV-event stream put in order (SPEC §14, B26).
//
// vLLM numbers its batches 0, 1, 2... per publisher instance, sends them
// over lossy PUB/SUB and has no heartbeat, epoch or snapshot
// (../shared/reference/vllm-kv-events-and-tokens.md §2-§3). This is the
// rule book the subscriber follows, free of sockets and threads:
//  - the next number: apply it;
//  - a gap: ask the replay socket for everything from the first missing
//    batch (when the engine has one), hold live batches meanwhile (bounded),
//    apply the replay in order, then what was held;
//  - a gap that cannot be replayed (no replay socket, a reply that starts
//    past the first missing batch, an end before the gap closed, a timeout,
//    too much held), a number that goes back (the engine restarted), a batch
//    that does not decode, or a lost connection: the engine is **cold** —
//    its index is cleared and only what arrives from then on is applied.
//    Never warm by assumption.
// A stream that starts (after subscribing, a restart or a lost connection)
// at a batch past 0 is **rebuilt** when the engine can replay: everything
// its buffer holds is asked for from batch 0, live batches are held, and
// the reply is applied from wherever the buffer starts, then what was held.
// A suffix of an engine's events applied in order never claims a block the
// engine does not hold (what was stored before it is unknown, a removal of
// an unknown block is skipped), so the index is a subset of the truth — and
// the whole truth when the buffer reaches back to batch 0, as it does after
// an engine restart or when a router starts beside a young engine. Without
// a replay endpoint, or when the rebuild fails, the first batch is applied
// whatever its number: blocks stored before it are unknown, an
// under-estimate only.
//
// Each call returns a step for the caller to carry out in order: clear the
// index (when asked), then apply the batches; send a replay request; count
// the gap's outcome. Times are the injected clock's.
#ifndef NARWHAL_ROUTER_FLEET_KV_EVENT_STREAM_H_
#define NARWHAL_ROUTER_FLEET_KV_EVENT_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engines/api.h"
#include "router/fleet/kv_event_decode.h"

namespace narwhal::router::kv {

struct KvStreamOptions {
  bool can_replay = false;  // the engine has a kv_events_replay endpoint
  bool rebuild = true;      // rebuild a stream that starts past batch 0 (see above)
  engines::MonoClock::duration replay_timeout = std::chrono::seconds(2);
  size_t max_held = 4096;  // live batches held while a replay runs
  KvDecodeLimits decode;
};

// How a gap ended (narwhal_kv_event_gaps_total{outcome}).
enum class GapOutcome {
  kReplayed,       // replayed whole: the index stays exact
  kNoReplay,       // the engine has no replay socket
  kReplayFailed,   // the reply started late, ended short or did not decode
  kReplayTimeout,  // no end marker within the timeout
  kReplayOverrun,  // more live batches than max_held arrived meanwhile
  kReset,          // the number went back: the engine restarted
  kBadBatch,       // a live batch did not decode
  kLost,           // the connection to the publisher was lost
};
const char* GapOutcomeName(GapOutcome outcome);

struct KvStreamStep {
  bool clear = false;  // clear the index before applying (cold)
  std::vector<KvEventBatch> apply;
  std::optional<uint64_t> replay_from;  // send a replay request
  std::optional<GapOutcome> gap;        // a gap ended (or began cold)
  std::string detail;                   // for the log line
};

class KvEventStream {
 public:
  explicit KvEventStream(KvStreamOptions options) : options_(std::move(options)) {}

  // A live message: its sequence frame and payload.
  KvStreamStep OnLive(std::string_view seq_frame, std::string_view payload, engines::MonoTime now);
  // One replay reply (the frames a DEALER receives). Ignored unless a
  // replay runs.
  KvStreamStep OnReplay(const std::vector<std::string_view>& frames);
  // The replay's timeout.
  KvStreamStep OnTick(engines::MonoTime now);
  // The subscription lost its publisher (disconnected).
  KvStreamStep OnLost(const std::string& why);

  bool replaying() const { return replaying_; }
  std::optional<engines::MonoTime> replay_deadline() const {
    return replaying_ ? std::optional(deadline_) : std::nullopt;
  }
  std::optional<uint64_t> last_seq() const { return last_; }

 private:
  struct Held {
    uint64_t seq;
    KvEventBatch batch;
  };
  // Cold: clear, then apply what is held (and `also`), from its numbers on.
  KvStreamStep Cold(GapOutcome why, std::string detail);
  // Applies `batch` numbered `seq` after the last one, or starts a replay or
  // goes cold on a gap (not replaying).
  void Next(uint64_t seq, KvEventBatch batch, engines::MonoTime now, KvStreamStep* step);
  // A stream that starts at `seq`: rebuilt from the engine's buffer (seq > 0
  // and a replay endpoint), else `batch` applied as its first.
  void Start(uint64_t seq, KvEventBatch batch, engines::MonoTime now, KvStreamStep* step);

  KvStreamOptions options_;
  std::optional<uint64_t> last_;  // the last applied batch's number
  bool replaying_ = false;
  // The replay rebuilds a stream from batch 0: its first batch may come
  // from further on (the buffer's start); nothing of it applied yet.
  bool rebuilding_ = false;
  bool rebuild_applied_ = false;
  uint64_t replay_next_ = 0;  // the number the replay owes next
  engines::MonoTime deadline_{};
  std::deque<Held> held_;  // live batches received while replaying
};

}  // namespace narwhal::router::kv

#endif  // NARWHAL_ROUTER_FLEET_KV_EVENT_STREAM_H_
