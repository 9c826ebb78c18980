#include "engines/http_engine_client.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <cstdio>

#include "engines/connector.h"
#include "engines/json_limits.h"
#include "engines/sse_reader.h"

namespace narwhal::engines {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxErrorBodyBytes = 64 * 1024;

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%gs", s);
  return buf;
}

EngineFailure Cancelled(Phase phase, const std::string& iid) {
  return MakeFailure(phase, iid, FailureReason::kCancelled, BreakerClass::kNone, 499,
                     "client went away", false);
}

EngineFailure DeadlineExpired(Phase phase, const std::string& iid) {
  return MakeFailure(phase, iid, FailureReason::kDeadline, BreakerClass::kNone, 504,
                     std::string("request deadline passed during the ") +
                         std::string(PhaseName(phase)) + " leg",
                     false);
}

// Transport failure of a leg that got no response status.
EngineFailure TransportFailure(Phase phase, const EngineTarget& target, httplib::Error error,
                               double connect_timeout_s) {
  switch (error) {
    case httplib::Error::Connection:
      return MakeFailure(phase, target.iid, FailureReason::kEngineUnreachable,
                         BreakerClass::kConnection, 502,
                         "engine unreachable: connection to " + target.url + " failed", true);
    case httplib::Error::ConnectionTimeout:
      return MakeFailure(phase, target.iid, FailureReason::kEngineUnreachable,
                         BreakerClass::kConnection, 504,
                         "engine unreachable: connect to " + target.url + " timed out after " +
                             FormatSeconds(connect_timeout_s),
                         true);
    default:
      return MakeFailure(phase, target.iid, FailureReason::kEngineConnection,
                         BreakerClass::kTimeout, 502,
                         "connection to engine lost before a response: " +
                             httplib::to_string(error),
                         true);
  }
}

// Time left until `deadline`, at least 1 ms and at most a day (httplib keeps
// timeouts as int milliseconds; the watchdog enforces the real bounds).
std::chrono::microseconds Remaining(MonoTime deadline) {
  const auto left = std::min(deadline - MonoClock::now(),
                             std::chrono::duration_cast<MonoClock::duration>(std::chrono::hours(24)));
  return std::max(std::chrono::duration_cast<std::chrono::microseconds>(left),
                  std::chrono::microseconds(1000));
}

// One HTTP leg: the client, its watchdog timer and its cancel hook.
class Leg {
 public:
  Leg(LegWatchdog& watchdog, const std::string& host, int port, const LegOptions& options)
      : client_(host, port),
        timer_(watchdog.NewTimer([this] { Abort(); })),
        cancel_hook_(options.cancel, [this] {
          cancelled_.store(true);
          Abort();
        }) {
    // httplib's stop() has no effect before send() opened its socket; an
    // abort that lands earlier (while the body is built) kills the socket
    // as soon as it exists.
    client_.set_socket_options([this](socket_t sock) {
      if (aborted_.load()) ::shutdown(sock, SHUT_RDWR);
    });
  }
  ~Leg() { timer_->Disarm(); }

  httplib::Client& client() { return client_; }
  LegWatchdog::Timer& timer() { return *timer_; }
  bool cancelled() const { return cancelled_.load(); }
  // Stops the timer for good; true if it had fired.
  bool Finish() {
    timer_->Disarm();
    return timer_->fired();
  }

 private:
  void Abort() {
    aborted_.store(true);
    client_.stop();
  }

  httplib::Client client_;
  std::atomic<bool> aborted_{false};
  std::shared_ptr<LegWatchdog::Timer> timer_;
  std::atomic<bool> cancelled_{false};
  CancelToken::Registration cancel_hook_;
};

httplib::Headers LegHeaders(const LegOptions& options, const std::string& api_key) {
  httplib::Headers headers{{"X-Request-Id", options.backend_request_id},
                           {"Accept", "application/json, text/event-stream"}};
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  return headers;
}

}  // namespace

HttpEngineClient::HttpEngineClient(HttpEngineClientOptions options)
    : options_(std::move(options)) {}

HttpEngineClient::~HttpEngineClient() = default;

PrefillOutcome HttpEngineClient::Prefill(const EngineTarget& producer, Api api,
                                         const json& client_body, const LegOptions& options) {
  constexpr Phase kPhase = Phase::kPrefill;
  PrefillOutcome out;
  std::string host;
  int port = 0;
  if (!ParseEngineUrl(producer.url, &host, &port)) {
    out.failure = MakeFailure(kPhase, producer.iid, FailureReason::kEngineUnreachable,
                              BreakerClass::kConnection, 502,
                              "engine unreachable: bad engine url " + producer.url, false);
    return out;
  }
  const MonoTime deadline = std::min(options.request_deadline,
                                     options.leg_deadline.value_or(MonoTime::max()));
  const bool deadline_is_request = deadline == options.request_deadline;
  if (options.cancel != nullptr && options.cancel->cancelled()) {
    out.failure = Cancelled(kPhase, producer.iid);
    return out;
  }
  if (MonoClock::now() >= deadline) {
    out.failure = deadline_is_request
                      ? DeadlineExpired(kPhase, producer.iid)
                      : MakeFailure(kPhase, producer.iid, FailureReason::kEngineTimeout,
                                    BreakerClass::kTimeout, 504, "prefill timed out", true);
    return out;
  }

  Leg leg(watchdog_, host, port, options);
  const auto connect_bound =
      std::min(Remaining(deadline), std::chrono::duration_cast<std::chrono::microseconds>(
                                        FromSeconds(options_.connect_timeout_s)));
  leg.client().set_connection_timeout(connect_bound);
  leg.client().set_read_timeout(Remaining(deadline) + std::chrono::seconds(1));
  leg.client().set_write_timeout(Remaining(deadline) + std::chrono::seconds(1));
  leg.timer().ArmAt(deadline);

  httplib::Request req;
  req.method = "POST";
  req.path = std::string(ApiPath(api));
  req.headers = LegHeaders(options, options_.api_key);
  req.body = BuildPrefillBody(client_body).dump();
  req.set_header("Content-Type", "application/json");
  int status = 0;
  std::string body;
  bool too_large = false;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (body.size() + n > options_.max_response_bytes) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  };
  const auto started = MonoClock::now();
  httplib::Result res = leg.client().send(req);
  const bool timed_out = leg.Finish();

  if (leg.cancelled()) {
    out.failure = Cancelled(kPhase, producer.iid);
  } else if (timed_out) {
    out.failure = deadline_is_request
                      ? DeadlineExpired(kPhase, producer.iid)
                      : MakeFailure(kPhase, producer.iid, FailureReason::kEngineTimeout,
                                    BreakerClass::kTimeout, 504,
                                    "prefill timed out after " +
                                        FormatSeconds(Seconds(deadline - started)),
                                    true);
  } else if (too_large) {
    out.failure = MakeFailure(kPhase, producer.iid, FailureReason::kInvalidResponse,
                              BreakerClass::kKvHandoff, 502,
                              "no handoff: prefill response exceeds " +
                                  std::to_string(options_.max_response_bytes) + " bytes",
                              false);
  } else if (status == 0) {
    out.failure = TransportFailure(kPhase, producer, res.error(),
                                   std::chrono::duration<double>(connect_bound).count());
  } else if (status < 200 || status > 299) {
    out.failure = ClassifyEngineStatus(kPhase, producer.iid, status, EngineErrorMessage(body),
                                       /*in_stream=*/false);
  } else if (res.error() != httplib::Error::Success) {
    out.failure = MakeFailure(kPhase, producer.iid, FailureReason::kEngineConnection,
                              BreakerClass::kTimeout, 502,
                              "connection to engine lost while reading the prefill response: " +
                                  httplib::to_string(res.error()),
                              true);
  } else {
    std::string why;
    std::optional<json> descriptor;
    if (!JsonDepthWithin(body)) {
      why = "prefill response " + DepthLimitText();
    } else if (json parsed = ParseJson(body); parsed.is_discarded()) {
      why = "prefill response is not valid JSON";
    } else {
      descriptor = ExtractDescriptor(parsed, &why);
    }
    if (!descriptor) {
      out.failure = MakeFailure(kPhase, producer.iid, FailureReason::kInvalidResponse,
                                BreakerClass::kKvHandoff, 502, "no handoff: " + why, false);
    } else {
      out.result.emplace(producer.iid, producer.url, api, options.backend_request_id,
                         options_.connector, std::move(*descriptor));
    }
  }
  return out;
}

DecodeOutcome HttpEngineClient::Decode(const EngineTarget& consumer, const PrefillResult& handoff,
                                       const json& client_body, bool client_streams,
                                       const LegOptions& options, DecodeObserver& observer) {
  constexpr Phase kPhase = Phase::kDecode;
  const Api api = handoff.endpoint();
  DecodeOutcome out;

  // B3: validate before any HTTP request; evidence counts against the producer.
  if (std::string why = ValidateContinuation(handoff, options_.connector, api); !why.empty()) {
    EngineFailure f = MakeFailure(kPhase, consumer.iid, FailureReason::kInvalidResponse,
                                  BreakerClass::kKvHandoff, 502, "invalid continuation: " + why,
                                  false);
    f.evidence_iid = handoff.producer_iid();
    out.failure = std::move(f);
    return out;
  }
  std::string host;
  int port = 0;
  if (!ParseEngineUrl(consumer.url, &host, &port)) {
    out.failure = MakeFailure(kPhase, consumer.iid, FailureReason::kEngineUnreachable,
                              BreakerClass::kConnection, 502,
                              "engine unreachable: bad engine url " + consumer.url, false);
    return out;
  }
  if (options.cancel != nullptr && options.cancel->cancelled()) {
    out.failure = Cancelled(kPhase, consumer.iid);
    return out;
  }
  const MonoTime started = MonoClock::now();
  if (started >= options.request_deadline) {
    out.failure = DeadlineExpired(kPhase, consumer.iid);
    return out;
  }

  // B12: the first-token budget starts now, before connect.
  const MonoTime first_token_deadline =
      std::min(started + FromSeconds(options_.first_token_timeout_s), options.request_deadline);
  const auto read_timeout = FromSeconds(options_.decode_read_timeout_s);
  // Which bound the timer is armed for, so an expiry is classified by cause.
  enum class Bound { kFirstToken, kRead, kRequest };
  Bound armed = first_token_deadline == options.request_deadline ? Bound::kRequest
                                                                  : Bound::kFirstToken;

  Leg leg(watchdog_, host, port, options);
  const auto connect_bound = std::min(
      Remaining(first_token_deadline),
      std::chrono::duration_cast<std::chrono::microseconds>(FromSeconds(options_.connect_timeout_s)));
  leg.client().set_connection_timeout(connect_bound);
  // The watchdog governs silence; httplib's idle timeout is only a backstop.
  leg.client().set_read_timeout(Remaining(options.request_deadline) + std::chrono::seconds(1));
  leg.client().set_write_timeout(Remaining(options.request_deadline) + std::chrono::seconds(1));
  leg.timer().ArmAt(first_token_deadline);

  const bool same_worker = consumer.iid == handoff.producer_iid();
  httplib::Request req;
  req.method = "POST";
  req.path = std::string(ApiPath(api));
  req.headers = LegHeaders(options, options_.api_key);
  req.body = BuildDecodeBody(client_body, handoff, same_worker, client_streams).dump();
  req.set_header("Content-Type", "application/json");

  int status = 0;
  std::string error_body;
  SseReader sse;
  StreamEvent event;
  bool first_token = false;
  bool done = false;
  bool observer_stopped = false;
  std::optional<EngineFailure> stream_error;
  int metadata_frames = 0;

  auto arm_read_timer = [&] {
    const MonoTime now = MonoClock::now();
    if (options_.decode_read_timeout_s > 0 && now + read_timeout < options.request_deadline) {
      armed = Bound::kRead;
      leg.timer().ArmAt(now + read_timeout);
    } else {
      armed = Bound::kRequest;
      leg.timer().ArmAt(options.request_deadline);
    }
  };
  const SseReader::EventFn on_event = [&](std::string_view data) {
    ClassifyEvent(data, &event);
    switch (event.kind) {
      case EventKind::kDone:
        done = true;
        return false;
      case EventKind::kError:
        stream_error = ClassifyEngineStatus(kPhase, consumer.iid, event.error_status,
                                            event.error_message, /*in_stream=*/true);
        return false;
      case EventKind::kToken:
        first_token = true;
        break;
      case EventKind::kMetadata:
      case EventKind::kMalformed:
        if (!first_token) ++metadata_frames;
        break;
    }
    if (!first_token) {
      observer_stopped = !observer.OnEvent(data, event);
      return !observer_stopped;
    }
    // After the first token a slow client may block here (back-pressure):
    // that is not engine silence, so the read timer pauses meanwhile.
    leg.timer().ArmAt(MonoTime::max());
    const bool keep_going = observer.OnEvent(data, event);
    if (!keep_going) {
      observer_stopped = true;
      return false;
    }
    arm_read_timer();
    return true;
  };
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      if (error_body.size() < kMaxErrorBodyBytes) {
        error_body.append(data, std::min(n, kMaxErrorBodyBytes - error_body.size()));
      }
      return true;
    }
    // B13: every transport chunk after the first token re-arms the read timer.
    if (first_token) arm_read_timer();
    return sse.Feed(std::string_view(data, n), on_event);
  };

  httplib::Result res = leg.client().send(req);
  const bool timed_out = leg.Finish();

  if (done && first_token) return out;  // generated output, then [DONE]
  if (leg.cancelled() || observer_stopped) {
    out.failure = Cancelled(kPhase, consumer.iid);
  } else if (done) {
    out.failure = MakeFailure(kPhase, consumer.iid, FailureReason::kEngineError,
                              BreakerClass::kStream, 502,
                              "stream ended with [DONE] before any token arrived", true);
  } else if (stream_error) {
    out.failure = std::move(stream_error);
  } else if (timed_out) {
    if (armed == Bound::kRequest) {
      out.failure = DeadlineExpired(kPhase, consumer.iid);
    } else if (armed == Bound::kFirstToken) {
      const std::string what =
          metadata_frames == 0
              ? "no frames at all"
              : std::to_string(metadata_frames) + " metadata frame(s) but no token";
      // A silent engine is stream evidence; one that keeps emitting metadata
      // is busy rather than broken (overload).
      out.failure = MakeFailure(
          kPhase, consumer.iid, FailureReason::kEngineTimeout,
          metadata_frames == 0 ? BreakerClass::kStream : BreakerClass::kOverload, 504,
          "no first token within " + FormatSeconds(options_.first_token_timeout_s) + ": " + what,
          true);
    } else {
      out.failure = MakeFailure(kPhase, consumer.iid, FailureReason::kEngineTimeout,
                                BreakerClass::kStream, 504,
                                "engine went silent between tokens: nothing arrived within the " +
                                    FormatSeconds(options_.decode_read_timeout_s) +
                                    " read timeout",
                                true);
    }
  } else if (status == 0) {
    out.failure = TransportFailure(kPhase, consumer, res.error(),
                                   std::chrono::duration<double>(connect_bound).count());
  } else if (status != 200) {
    out.failure = ClassifyEngineStatus(kPhase, consumer.iid, status,
                                       EngineErrorMessage(error_body), /*in_stream=*/false);
  } else if (!sse.error().empty()) {
    out.failure = MakeFailure(kPhase, consumer.iid, FailureReason::kEngineError,
                              BreakerClass::kStream, 502, "malformed stream: " + sse.error(),
                              true);
  } else {
    out.failure = MakeFailure(kPhase, consumer.iid, FailureReason::kEngineError,
                              BreakerClass::kStream, 502,
                              "stream ended before the [DONE] terminator", true);
  }
  return out;
}

ControlResponse HttpEngineClient::Control(const EngineTarget& engine, std::string_view method,
                                          std::string_view path, const std::string& body,
                                          double timeout_s) {
  ControlResponse out;
  std::string host;
  int port = 0;
  if (!ParseEngineUrl(engine.url, &host, &port)) {
    out.error = "bad engine url " + engine.url;
    return out;
  }
  LegOptions options;
  options.backend_request_id = "narwhal-control";
  const MonoTime deadline = MonoClock::now() + FromSeconds(timeout_s);
  Leg leg(watchdog_, host, port, options);
  const auto bound = Remaining(deadline);
  leg.client().set_connection_timeout(
      std::min(bound, std::chrono::duration_cast<std::chrono::microseconds>(
                          FromSeconds(options_.connect_timeout_s))));
  leg.client().set_read_timeout(bound);
  leg.client().set_write_timeout(bound);
  leg.timer().ArmAt(deadline);  // a total bound, not only an idle one

  httplib::Request req;
  req.method = std::string(method);
  req.path = std::string(path);
  if (!options_.api_key.empty()) req.set_header("Authorization", "Bearer " + options_.api_key);
  if (!body.empty()) {
    req.body = body;
    req.set_header("Content-Type", "application/json");
  }
  bool too_large = false;
  req.response_handler = [&](const httplib::Response& r) {
    out.status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (out.body.size() + n > options_.max_response_bytes) {
      too_large = true;
      return false;
    }
    out.body.append(data, n);
    return true;
  };
  httplib::Result res = leg.client().send(req);
  const bool timed_out = leg.Finish();
  if (timed_out) {
    out.status = 0;
    out.error = "no answer within " + FormatSeconds(timeout_s);
  } else if (too_large) {
    out.status = 0;
    out.error = "response exceeds " + std::to_string(options_.max_response_bytes) + " bytes";
  } else if (out.status == 0) {
    out.error = httplib::to_string(res.error());
  } else if (res.error() != httplib::Error::Success) {
    out.status = 0;
    out.error = "connection lost while reading the response: " + httplib::to_string(res.error());
  }
  return out;
}

}  // namespace narwhal::engines
