#include "router/fleet/kv_event_stream.h"

#include <absl/strings/str_cat.h>

#include <utility>

namespace narwhal::router::kv {

const char* GapOutcomeName(GapOutcome outcome) {
  switch (outcome) {
    case GapOutcome::kReplayed:
      return "replayed";
    case GapOutcome::kNoReplay:
      return "no_replay";
    case GapOutcome::kReplayFailed:
      return "replay_failed";
    case GapOutcome::kReplayTimeout:
      return "replay_timeout";
    case GapOutcome::kReplayOverrun:
      return "replay_overrun";
    case GapOutcome::kReset:
      return "reset";
    case GapOutcome::kBadBatch:
      return "bad_batch";
    case GapOutcome::kLost:
      return "lost";
  }
  return "lost";
}

KvStreamStep KvEventStream::Cold(GapOutcome why, std::string detail) {
  KvStreamStep step;
  step.clear = true;
  step.gap = why;
  step.detail = std::move(detail);
  replaying_ = false;
  rebuilding_ = false;
  for (Held& h : held_) {
    step.apply.push_back(std::move(h.batch));
    last_ = h.seq;
  }
  held_.clear();
  return step;
}

void KvEventStream::Start(uint64_t seq, KvEventBatch batch, engines::MonoTime now,
                          KvStreamStep* step) {
  if (seq == 0 || !options_.can_replay || !options_.rebuild) {
    last_ = seq;
    step->apply.push_back(std::move(batch));
    return;
  }
  last_.reset();
  replaying_ = true;
  rebuilding_ = true;
  rebuild_applied_ = false;
  replay_next_ = 0;
  deadline_ = now + options_.replay_timeout;
  held_.push_back(Held{seq, std::move(batch)});
  step->replay_from = 0;
  step->detail =
      absl::StrCat(step->detail.empty() ? "" : step->detail + "; ", "the stream starts at batch ",
                   seq, ": rebuilding from the engine's replay buffer");
}

void KvEventStream::Next(uint64_t seq, KvEventBatch batch, engines::MonoTime now,
                         KvStreamStep* step) {
  if (!last_) {
    Start(seq, std::move(batch), now, step);
    return;
  }
  if (seq == *last_ + 1) {
    last_ = seq;
    step->apply.push_back(std::move(batch));
    return;
  }
  if (seq <= *last_) {
    *step = Cold(GapOutcome::kReset, absl::StrCat("sequence went back from ", *last_, " to ", seq,
                                                  ": the engine restarted"));
    Start(seq, std::move(batch), now, step);
    return;
  }
  const uint64_t missing = seq - *last_ - 1;
  if (!options_.can_replay) {
    *step = Cold(GapOutcome::kNoReplay, absl::StrCat(missing, " batch(es) lost after ", *last_,
                                                     " and the engine has no replay endpoint"));
    last_ = seq;
    step->apply.push_back(std::move(batch));
    return;
  }
  replaying_ = true;
  replay_next_ = *last_ + 1;
  deadline_ = now + options_.replay_timeout;
  held_.push_back(Held{seq, std::move(batch)});
  step->replay_from = replay_next_;
  step->detail =
      absl::StrCat(missing, " batch(es) lost after ", *last_, ": replaying from ", replay_next_);
}

KvStreamStep KvEventStream::OnLive(std::string_view seq_frame, std::string_view payload,
                                   engines::MonoTime now) {
  absl::StatusOr<uint64_t> seq = DecodeSeq(seq_frame);
  absl::StatusOr<KvEventBatch> batch =
      seq.ok() ? DecodeKvEventBatch(payload, options_.decode) : absl::StatusOr<KvEventBatch>();
  if (!seq.ok() || !batch.ok()) {
    KvStreamStep step =
        Cold(GapOutcome::kBadBatch,
             absl::StrCat("a batch did not decode: ",
                          std::string((seq.ok() ? batch.status() : seq.status()).message())));
    if (seq.ok()) last_ = *seq;
    return step;
  }
  KvStreamStep step;
  if (replaying_) {
    if (held_.size() >= options_.max_held) {
      step = Cold(
          GapOutcome::kReplayOverrun,
          absl::StrCat("more than ", options_.max_held, " live batches arrived during the replay"));
      last_ = *seq;
      step.apply.push_back(*std::move(batch));
      return step;
    }
    held_.push_back(Held{*seq, *std::move(batch)});
    return step;
  }
  Next(*seq, *std::move(batch), now, &step);
  return step;
}

KvStreamStep KvEventStream::OnReplay(const std::vector<std::string_view>& frames) {
  KvStreamStep step;
  if (!replaying_) return step;
  absl::StatusOr<ReplayReply> reply = DecodeReplayReply(frames);
  if (!reply.ok()) {
    return Cold(GapOutcome::kReplayFailed, absl::StrCat("a replay reply did not decode: ",
                                                        std::string(reply.status().message())));
  }
  if (reply->end) {
    if (!last_ || replay_next_ < held_.front().seq) {
      return Cold(GapOutcome::kReplayFailed,
                  absl::StrCat("the replay ended at ", replay_next_, ", before ", held_.front().seq,
                               " (the gap stays open)"));
    }
    replaying_ = false;
    if (rebuilding_) {
      rebuilding_ = false;  // not a gap: nothing was lost
      step.detail = absl::StrCat("rebuilt from the engine's replay buffer up to ", *last_);
    } else {
      step.gap = GapOutcome::kReplayed;
      step.detail = absl::StrCat("replayed up to ", replay_next_ - 1);
    }
    std::deque<Held> held = std::move(held_);
    held_.clear();
    while (!held.empty()) {
      Held h = std::move(held.front());
      held.pop_front();
      if (h.seq <= *last_) continue;  // the replay brought it already
      if (h.seq != *last_ + 1) {
        // Another gap among the batches held: lost for good. Cold, from the
        // held batch after it on (what this step applied goes with the clear).
        held_ = std::move(held);
        held_.push_front(std::move(h));
        return Cold(GapOutcome::kReplayFailed, absl::StrCat("batches lost again after ", *last_));
      }
      last_ = h.seq;
      step.apply.push_back(std::move(h.batch));
    }
    return step;
  }
  if (reply->seq < replay_next_) return step;  // a batch the index has
  if (rebuilding_ && !rebuild_applied_ && reply->seq > replay_next_) {
    // The buffer starts further on: a suffix of the stream is as safe.
    replay_next_ = reply->seq;
  }
  if (reply->seq > replay_next_) {
    return Cold(GapOutcome::kReplayFailed,
                absl::StrCat("the replay starts at ", reply->seq, ", past ", replay_next_,
                             " (the engine's buffer no longer holds it)"));
  }
  absl::StatusOr<KvEventBatch> batch = DecodeKvEventBatch(reply->payload, options_.decode);
  if (!batch.ok()) {
    return Cold(GapOutcome::kReplayFailed, absl::StrCat("a replayed batch did not decode: ",
                                                        std::string(batch.status().message())));
  }
  last_ = reply->seq;
  ++replay_next_;
  rebuild_applied_ = true;
  step.apply.push_back(*std::move(batch));
  return step;
}

KvStreamStep KvEventStream::OnTick(engines::MonoTime now) {
  if (!replaying_ || now < deadline_) return {};
  return Cold(GapOutcome::kReplayTimeout, "the replay did not end within its timeout");
}

KvStreamStep KvEventStream::OnLost(const std::string& why) {
  KvStreamStep step = Cold(GapOutcome::kLost, why);
  step.apply.clear();  // held batches precede the loss: their successors are unknown
  last_.reset();       // whatever comes next starts a new stream
  return step;
}

}  // namespace narwhal::router::kv
