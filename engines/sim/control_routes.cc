#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engines/json_limits.h"
#include "engines/sim/responses.h"
#include "engines/sim/routes.h"

namespace narwhal::sim {

using engines::ParseJson;
namespace {

void Json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(Dump(body), "application/json");
}

void Error(httplib::Response& res, int status, std::string message) {
  res.status = status;
  res.set_content(ErrorBody({status, ErrorTypeForStatus(status), std::move(message), std::nullopt}),
                  "application/json");
}

// POST /sim/kv/pull (a consumer reads the blocks) and POST /sim/kv/release
// (a consumer that refused the request carrying the handoff before admission
// tells the producer to free them).
void HandleKvEnd(EngineState& state, const httplib::Request& req, httplib::Response& res,
                 bool release) {
  const nlohmann::json body = ParseJson(req.body);
  if (!body.is_object() || !body.contains("remote_request_id") ||
      !body["remote_request_id"].is_string()) {
    Error(res, 400, "remote_request_id: required string");
    return;
  }
  const std::string id = body["remote_request_id"].get<std::string>();
  const nlohmann::json engine = body.value("remote_engine_id", nlohmann::json());
  if (!engine.is_string() || engine.get<std::string>() != state.options.engine_id) {
    Error(
        res, 404,
        absl::StrCat("remote_engine_id does not name this engine (", state.options.engine_id, ")"));
    return;
  }
  KvConsumer consumer;
  consumer.engine_id = body.value("consumer_engine_id", nlohmann::json()).is_string()
                           ? body["consumer_engine_id"].get<std::string>()
                           : "";
  consumer.request_id = body.value("consumer_request_id", nlohmann::json()).is_string()
                            ? body["consumer_request_id"].get<std::string>()
                            : "";
  consumer.peer = absl::StrCat(req.remote_addr, ":", req.remote_port);
  const std::string by = consumer.engine_id;
  const PullResult result =
      release ? state.kv.Release(id, std::move(consumer)) : state.kv.Pull(id, std::move(consumer));
  if (release && result.outcome == PullOutcome::kOk) {
    state.log.Info(
        absl::StrCat("handoff ", id, " released by ", by, " (refused before admission)"));
  }
  switch (result.outcome) {
    case PullOutcome::kOk: {
      nlohmann::json blocks = nlohmann::json::array();
      blocks.push_back(result.entry.block_ids);
      Json(res, 200,
           {{"remote_request_id", id},
            {"remote_block_ids", std::move(blocks)},
            {"remote_num_tokens", result.entry.num_tokens}});
      return;
    }
    case PullOutcome::kConsumed:
      Error(res, 409, absl::StrCat("handoff ", id, " was already consumed"));
      return;
    case PullOutcome::kReleased:
      Error(res, 409, absl::StrCat("handoff ", id, " was already released"));
      return;
    case PullOutcome::kExpired:
      state.log.Warning(absl::StrCat("pull of expired handoff ", id));
      Error(res, 410, absl::StrCat("handoff ", id, " expired"));
      return;
    case PullOutcome::kUnknown:
      break;
  }
  Error(res, 404, absl::StrCat("unknown handoff ", id));
}

}  // namespace

void AddControlRoutes(httplib::Server& server, EngineState& state) {
  server.Get("/sim/faults", [&state](const httplib::Request&, httplib::Response& res) {
    Json(res, 200, state.faults.ToJson());
  });
  server.Post("/sim/faults", [&state](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<std::vector<FaultRule>> rules = ParseFaultBody(req.body);
    absl::Status status = rules.ok() ? state.faults.Append(*std::move(rules)) : rules.status();
    if (!status.ok()) {
      Error(res, 400, std::string(status.message()));
      return;
    }
    const nlohmann::json book = state.faults.ToJson();
    state.log.Info(absl::StrCat("fault rules set (", book["faults"].size(), " held)"));
    Json(res, 200, book);
  });
  server.Delete("/sim/faults", [&state](const httplib::Request&, httplib::Response& res) {
    state.faults.Clear();
    state.log.Info("fault rules cleared");
    Json(res, 200, state.faults.ToJson());
  });
  server.Get("/sim/requests", [&state](const httplib::Request&, httplib::Response& res) {
    Json(res, 200, state.requests.ToJson());
  });
  server.Delete("/sim/requests", [&state](const httplib::Request&, httplib::Response& res) {
    state.requests.Clear();
    Json(res, 200, state.requests.ToJson());
  });
  server.Get("/sim/kv", [&state](const httplib::Request&, httplib::Response& res) {
    Json(res, 200, state.kv.ToJson());
  });
  server.Post("/sim/kv/pull", [&state](const httplib::Request& req, httplib::Response& res) {
    HandleKvEnd(state, req, res, /*release=*/false);
  });
  server.Post("/sim/kv/release", [&state](const httplib::Request& req, httplib::Response& res) {
    HandleKvEnd(state, req, res, /*release=*/true);
  });
  server.Get("/sim/info", [&state](const httplib::Request&, httplib::Response& res) {
    const SimOptions& o = state.options;
    Json(res, 200,
         {{"engine_id", o.engine_id},
          {"model", o.model},
          {"role", std::string(RoleName(o.role))},
          {"host", o.host},
          {"port", state.port.load()},
          {"version", o.vllm_version},
          {"max_model_len", o.max_model_len},
          {"system_fingerprint", state.fingerprint},
          {"prefill_ms_per_1k_tokens", o.prefill_ms_per_1k_tokens},
          {"token_interval_ms", o.token_interval_ms},
          {"kv_transfer_ms", o.kv_transfer_ms},
          {"kv_lease_s", o.kv_lease_s},
          {"max_silence_s", o.max_silence_s},
          {"threads", o.threads},
          {"kv_load_failure_policy", std::string(PolicyName(o.kv_load_failure_policy))},
          {"prompt_tokens_details", o.prompt_tokens_details},
          {"api_key", !o.api_key.empty()},
          {"block_size", o.block_size},
          {"kv_events_port", state.kv_events ? state.kv_events->port() : -1},
          {"kv_events_replay_port", state.kv_events ? state.kv_events->replay_port() : -1}});
  });
}

}  // namespace narwhal::sim
