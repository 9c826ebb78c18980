#include "engines/http/decode_stream.h"

#include <algorithm>
#include <utility>

#include "engines/api.h"
#include "engines/http/connector.h"
#include "engines/http/leg_failures.h"
#include "engines/http/stream_classifier.h"
#include "engines/json_limits.h"

namespace narwhal::engines {
namespace {

constexpr Phase kPhase = Phase::kDecode;
// A non-200 answer's body kept for the failure's words, at most.
constexpr size_t kMaxErrorBodyBytes = 64 * 1024;

}  // namespace

std::optional<DecodeOutcome> DecodeStream::Refuse(const EngineTarget& consumer,
                                                  const PrefillResult& handoff,
                                                  const HttpEngineClientOptions& opts,
                                                  const LegOptions& options, MonoTime now,
                                                  std::string* host, int* port) {
  DecodeOutcome out;
  // Single use: a handoff feeds one decode leg; a second one is the caller's
  // mistake, not evidence against any engine.
  if (!handoff.Claim()) {
    EngineFailure f = MakeFailure(kPhase, consumer.iid, FailureReason::kInvalidResponse,
                                  BreakerClass::kNone, FailureCause::kInvalidContinuation,
                                  "invalid continuation: the handoff was already used by a "
                                  "decode (a handoff is single use)",
                                  false);
    f.handoff_rejection = "reused_handoff";
    out.failure = std::move(f);
    return out;
  }
  // B3: validate before any HTTP request; evidence counts against the producer.
  if (DescriptorRejection why =
          handoff.local() ? DescriptorRejection{}
                          : ValidateContinuation(handoff, opts.connector, handoff.endpoint(),
                                                 opts.remote_host_policy);
      !why.ok()) {
    EngineFailure f = MakeFailure(kPhase, consumer.iid, FailureReason::kInvalidResponse,
                                  BreakerClass::kKvHandoff, FailureCause::kInvalidContinuation,
                                  "invalid continuation: " + why.detail, false);
    f.evidence_iid = handoff.producer_iid();
    f.handoff_rejection = std::move(why.reason);
    out.failure = std::move(f);
    return out;
  }
  if (!ParseEngineUrl(consumer.url, host, port)) {
    out.failure = MakeFailure(kPhase, consumer.iid, FailureReason::kEngineUnreachable,
                              BreakerClass::kConnection, FailureCause::kBadUrl,
                              "engine unreachable: bad engine url " + consumer.url, false);
    return out;
  }
  if (options.cancel != nullptr && options.cancel->cancelled()) {
    out.failure = Cancelled(kPhase, consumer.iid);
    out.handoff_left_with_producer = true;
    return out;
  }
  if (now >= options.request_deadline) {
    out.failure = DeadlineExpired(kPhase, consumer.iid);
    out.handoff_left_with_producer = true;
    return out;
  }
  return std::nullopt;
}

DecodeStream::DecodeStream(const HttpEngineClientOptions& opts, const EngineTarget& consumer,
                           MonoTime started, MonoTime request_deadline, DecodeObserver& observer)
    : opts_(opts),
      consumer_(consumer),
      observer_(observer),
      request_deadline_(request_deadline),
      // B12: the first-token budget starts with the leg, before connect.
      first_token_deadline_(
          std::min(started + FromSeconds(opts.first_token_timeout_s), request_deadline)),
      first_token_bound_(first_token_deadline_ == request_deadline ? LegBound::kRequest
                                                                   : LegBound::kFirstToken),
      read_timeout_(FromSeconds(opts.decode_read_timeout_s)),
      sse_(opts.max_event_bytes),
      on_event_([this](std::string_view payload) { return OnEvent(payload); }) {}

LegAlarm DecodeStream::Connecting(MonoTime now) const {
  const MonoTime connect_deadline = now + FromSeconds(opts_.connect_timeout_s);
  if (connect_deadline < first_token_deadline_) return {connect_deadline, LegBound::kConnect};
  return {first_token_deadline_, first_token_bound_};
}

LegAlarm DecodeStream::Connected() const { return {first_token_deadline_, first_token_bound_}; }

LegAlarm DecodeStream::ReadAlarm() const {
  if (opts_.decode_read_timeout_s > 0 && silent_since_ + read_timeout_ < request_deadline_) {
    return {silent_since_ + read_timeout_, LegBound::kRead};
  }
  return {request_deadline_, LegBound::kRequest};
}

void DecodeStream::RestartReadTimer(MonoTime now) {
  silent_since_ = now;
  pending_alarm_ = ReadAlarm();
}

std::optional<LegAlarm> DecodeStream::TakeAlarm() { return std::exchange(pending_alarm_, {}); }

bool DecodeStream::Body(std::string_view bytes, MonoTime now) {
  if (status_ != 200) {
    if (error_body_.size() < kMaxErrorBodyBytes) {
      error_body_.append(bytes.substr(0, kMaxErrorBodyBytes - error_body_.size()));
    }
    return error_body_.size() < kMaxErrorBodyBytes;
  }
  if (bytes.empty()) return true;
  now_ = now;
  const size_t comments = sse_.comments();
  if (!sse_.Feed(bytes, on_event_)) return false;
  // A keep-alive comment is a complete unit too (B13).
  if (first_token_ && sse_.comments() != comments) RestartReadTimer(now);
  return true;
}

bool DecodeStream::OnEvent(std::string_view payload) {
  // The payload as relayed: repaired when its text was not valid Unicode.
  const std::string_view data = ClassifyEvent(payload, &event_);
  switch (event_.kind) {
    case EventKind::kDone:
      done_ = true;
      return false;
    case EventKind::kError:
      stream_error_ = ClassifyEngineStatus(kPhase, consumer_.iid, event_.error_status,
                                           event_.error_message, /*in_stream=*/true);
      return false;
    case EventKind::kToken:
      first_token_ = true;  // B13 from the first token on
      break;
    case EventKind::kMetadata:
      if (!first_token_) ++metadata_frames_;
      break;
    case EventKind::kMalformed:
      // Whether it carried output cannot be known: the leg fails, on every
      // door alike, rather than lose text while reporting success.
      malformed_event_ = "malformed stream: an event of " + std::to_string(payload.size()) +
                         " bytes is not a JSON object (or " + DepthLimitText() + ")";
      return false;
  }
  if (event_.choices > kMaxChoices || event_.stray_choice_index) {
    choice_bound_ = ChoiceBoundError(event_);
    return false;
  }
  if (first_token_) RestartReadTimer(now_);
  if (!observer_.OnEvent(data, event_)) {
    observer_stopped_ = true;
    return false;
  }
  return true;
}

bool DecodeStream::FlushStarted(MonoTime now) {
  flush_started_ = now;
  return first_token_;
}

std::optional<LegAlarm> DecodeStream::FlushEnded(MonoTime now, bool keep_going) {
  if (!keep_going) {
    observer_stopped_ = true;
    return std::nullopt;
  }
  if (!first_token_) return Connected();
  // The engine's silence resumes where the client's pause began.
  silent_since_ += now - flush_started_;
  return ReadAlarm();
}

DecodeOutcome DecodeStream::Finish(DecodeLegEnd end) {
  DecodeOutcome out;
  if (Succeeded()) return out;
  std::optional<EngineFailure>& f = out.failure;
  if (end.cancelled || observer_stopped_) {
    f = Cancelled(kPhase, consumer_.iid);
  } else if (done_) {
    f = MakeFailure(kPhase, consumer_.iid, FailureReason::kEngineError, BreakerClass::kStream,
                    FailureCause::kEarlyDone, "stream ended with [DONE] before any token arrived",
                    true);
  } else if (stream_error_) {
    f = std::move(stream_error_);
  } else if (!malformed_event_.empty()) {
    f = MakeFailure(kPhase, consumer_.iid, FailureReason::kEngineError, BreakerClass::kStream,
                    FailureCause::kMalformedStream, std::move(malformed_event_), true);
  } else if (!choice_bound_.empty()) {
    f = MakeFailure(kPhase, consumer_.iid, FailureReason::kInvalidResponse, BreakerClass::kStream,
                    FailureCause::kResponseBound, std::move(choice_bound_), false);
  } else if (end.timed_out == LegBound::kConnect) {
    f = ConnectTimeout(kPhase, consumer_, end.connection_key, opts_.connect_timeout_s);
  } else if (end.timed_out == LegBound::kRequest) {
    f = DeadlineExpired(kPhase, consumer_.iid);
  } else if (end.timed_out == LegBound::kFirstToken) {
    const std::string what = metadata_frames_ == 0 ? "no frames at all"
                                                   : std::to_string(metadata_frames_) +
                                                         " metadata frame(s) but no token";
    // A silent engine is stream evidence; one that keeps emitting metadata
    // is busy rather than broken (overload).
    f = MakeFailure(
        kPhase, consumer_.iid, FailureReason::kEngineTimeout,
        metadata_frames_ == 0 ? BreakerClass::kStream : BreakerClass::kOverload,
        FailureCause::kFirstTokenTimeout,
        "no first token within " + FormatSeconds(opts_.first_token_timeout_s) + ": " + what, true);
  } else if (end.timed_out != LegBound::kNone) {
    f = MakeFailure(kPhase, consumer_.iid, FailureReason::kEngineTimeout, BreakerClass::kStream,
                    FailureCause::kReadTimeout,
                    "engine went silent between tokens: nothing arrived within the " +
                        FormatSeconds(opts_.decode_read_timeout_s) + " read timeout",
                    true);
  } else if (!end.interim_bound.empty()) {
    f = MakeFailure(kPhase, consumer_.iid, FailureReason::kInvalidResponse,
                    BreakerClass::kInferenceStatus, FailureCause::kResponseBound,
                    std::move(end.interim_bound), false);
  } else if (status_ != 0 && status_ != 200) {
    f = ClassifyEngineStatus(kPhase, consumer_.iid, status_, EngineErrorMessage(error_body_),
                             /*in_stream=*/false);
  } else if (!end.response_bound.empty()) {
    // The header block, or after a 200 a chunk header or the trailer.
    f = MakeFailure(kPhase, consumer_.iid, FailureReason::kInvalidResponse,
                    BreakerClass::kInferenceStatus, FailureCause::kResponseBound,
                    std::move(end.response_bound), false);
  } else if (status_ == 0 && end.transport) {
    f = std::move(end.transport);
  } else if (status_ == 0) {
    f = MakeFailure(kPhase, consumer_.iid, FailureReason::kEngineConnection, BreakerClass::kTimeout,
                    FailureCause::kConnectionLost, "connection to engine lost before a response",
                    true);
  } else if (!sse_.error().empty()) {
    f = MakeFailure(kPhase, consumer_.iid, FailureReason::kEngineError, BreakerClass::kStream,
                    FailureCause::kMalformedStream, "malformed stream: " + sse_.error(), true);
  } else {
    f = MakeFailure(kPhase, consumer_.iid, FailureReason::kEngineError, BreakerClass::kStream,
                    FailureCause::kUnterminated, "stream ended before the [DONE] terminator", true);
  }
  // Nobody took the handoff when the request never reached the consumer, or
  // the consumer refused it with an error status before streaming (before
  // admission): the producer still pins its blocks.
  out.handoff_left_with_producer = !request_sent_ || (status_ != 0 && status_ != 200);
  return out;
}

}  // namespace narwhal::engines
