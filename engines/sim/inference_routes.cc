#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engines/json_limits.h"
#include "engines/sim/generation.h"
#include "engines/sim/kv_pull.h"
#include "engines/sim/openai_request.h"
#include "engines/sim/peer_socket.h"
#include "engines/sim/recording.h"
#include "engines/sim/responses.h"
#include "engines/sim/routes.h"
#include "engines/sim/waiter.h"

namespace narwhal::sim {

using engines::ParseJson;
namespace {

// X-Request-Id, else the body's request_id, else a random id.
std::string RequestIdOf(const httplib::Request& req) {
  std::string id = req.get_header_value("X-Request-Id");
  if (!id.empty()) return id;
  const nlohmann::json body = ParseJson(req.body);
  if (body.is_object() && body.contains("request_id") && body["request_id"].is_string() &&
      !body["request_id"].get<std::string>().empty()) {
    return body["request_id"].get<std::string>();
  }
  return RandomHex(32);
}

constexpr absl::Duration kNotifyTimeout = absl::Seconds(2);

// A request refused before admission that carried a complete consumer
// descriptor: the producer is told to free the handoff before the refusal
// is answered (vLLM's _with_kv_transfer_rejection_cleanup notifies the
// connector; doing it first keeps the simulator deterministic).
void NotifyProducerOfRejection(EngineState& state, const KvParams& kv,
                               const std::string& request_id, int status) {
  if (kv.kind != KvParams::Kind::kConsumer) return;
  const PullReply reply = NotifyRejected(kv, state.options, request_id, kNotifyTimeout);
  if (reply.ok) {
    state.log.Info(absl::StrCat("refused request ", request_id, " (", status,
                                ") before admission; producer ", kv.remote_engine_id,
                                " freed handoff ", kv.remote_request_id));
  } else {
    state.log.Warning(absl::StrCat(
        "refused request ", request_id, " (", status, ") before admission; telling producer ",
        kv.remote_engine_id, " to free handoff ", kv.remote_request_id, " failed: ", reply.detail));
  }
}

// The descriptor of a body that failed validation, when it has one.
KvParams KvParamsOf(const std::string& body) {
  const nlohmann::json parsed = ParseJson(body);
  if (!parsed.is_object()) return KvParams{};
  return ParseKvParams(parsed.value("kv_transfer_params", nlohmann::json()));
}

void AnswerError(EngineState& state, uint64_t seq, const ApiError& error, RequestEnd end,
                 httplib::Response& res) {
  res.status = error.status;
  res.set_content(ErrorBody(error), "application/json");
  FinishRecord(state, seq, error.status, end);
}

void HandleInference(EngineState& state, Api api, const httplib::Request& req,
                     httplib::Response& res) {
  const uint64_t seq = BeginRecord(state, req);
  const std::string request_id = RequestIdOf(req);
  res.set_header("X-Request-Id", request_id);
  if (!Authorized(state, req)) {
    res.status = 401;
    res.set_content("{\"error\":\"Unauthorized\"}", "application/json");
    FinishRecord(state, seq, 401, RequestEnd::kError);
    return;
  }
  ParsedRequest parsed = ParseInferenceRequest(api, req.get_header_value("Content-Type"), req.body,
                                               state.options.model, state.options.max_model_len);
  if (parsed.error.has_value()) {
    NotifyProducerOfRejection(state, KvParamsOf(req.body), request_id, parsed.error->status);
    AnswerError(state, seq, *parsed.error, RequestEnd::kError, res);
    return;
  }
  InferenceRequest& request = parsed.request;
  const Phase phase = request.phase();
  std::optional<FaultRule> fault = state.faults.Take(phase, request.kv.remote_engine_id);
  state.requests.Update(seq, [&](RequestRecord& r) {
    r.phase = std::string(PhaseName(phase));
    if (fault.has_value()) r.fault = std::string(FaultKindName(fault->kind));
  });
  if (fault.has_value()) {
    state.log.Info(absl::StrCat("fault ", FaultKindName(fault->kind), " fires for a ",
                                PhaseName(phase), " request (", req.path, ")"));
  }

  const engines::PeerSocket peer = engines::PeerSocket::Find(req.local_port, req.remote_port);
  const Waiter waiter(&state.stopping, peer);
  const FaultKind kind = fault.has_value() ? fault->kind : FaultKind::kSlowTokens;
  const bool faulted = fault.has_value();

  if (faulted && kind == FaultKind::kDropConnection) {
    if (!peer.valid()) {
      state.log.Warning("drop_connection: connection not found; answering 500");
    }
    peer.Abort();
    res.status = 500;
    FinishRecord(state, seq, 0, RequestEnd::kFault);
    return;
  }
  if (faulted && kind == FaultKind::kDelayHeaders) {
    const WaitEnd how = waiter.Sleep(absl::Milliseconds(fault->ms));
    if (how != WaitEnd::kElapsed) {
      peer.Abort();
      FinishRecord(state, seq, 0,
                   how == WaitEnd::kStopped ? RequestEnd::kStopped : RequestEnd::kClientGone);
      return;
    }
  }
  if (faulted && kind == FaultKind::kHttpStatus) {
    const std::string message =
        fault->message.empty()
            ? absl::StrCat("Simulated engine fault (http_status ", fault->status, ")")
            : fault->message;
    ApiError error{fault->status,
                   fault->type.empty() ? ErrorTypeForStatus(fault->status) : fault->type, message,
                   std::nullopt};
    NotifyProducerOfRejection(state, request.kv, request_id, fault->status);
    AnswerError(state, seq, error, RequestEnd::kFault, res);
    return;
  }

  const bool stream = request.stream;
  auto generation = std::make_shared<Generation>(state, std::move(request), request_id,
                                                 std::move(fault), seq, waiter);
  if (!stream) {
    if (!generation->Respond(res)) peer.Abort();
    return;
  }
  res.status = 200;
  state.requests.Update(seq, [](RequestRecord& r) { r.status = 200; });
  res.set_chunked_content_provider("text/event-stream; charset=utf-8",
                                   [generation](size_t /*offset*/, httplib::DataSink& sink) {
                                     if (!generation->Stream(sink)) return false;
                                     sink.done();
                                     return true;
                                   });
}

}  // namespace

void AddInferenceRoutes(httplib::Server& server, EngineState& state) {
  server.Post("/v1/completions", [&state](const httplib::Request& req, httplib::Response& res) {
    HandleInference(state, Api::kCompletions, req, res);
  });
  server.Post("/v1/chat/completions",
              [&state](const httplib::Request& req, httplib::Response& res) {
                HandleInference(state, Api::kChat, req, res);
              });
}

}  // namespace narwhal::sim
