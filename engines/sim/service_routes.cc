#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engines/sim/openai_request.h"
#include "engines/sim/recording.h"
#include "engines/sim/responses.h"
#include "engines/sim/routes.h"

namespace narwhal::sim {
namespace {

std::string LabelValue(const std::string& value) {
  return absl::StrReplaceAll(value, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

std::string MetricsText(EngineState& state) {
  const std::string labels =
      absl::StrCat("{engine=\"0\",model_name=\"", LabelValue(state.options.model), "\"}");
  std::string text;
  absl::StrAppend(&text,
                  "# HELP vllm:num_requests_running Number of requests in model execution "
                  "batches.\n# TYPE vllm:num_requests_running gauge\n",
                  "vllm:num_requests_running", labels, " ", state.running.load(), ".0\n");
  absl::StrAppend(&text,
                  "# HELP vllm:num_requests_waiting Number of requests waiting to be "
                  "processed.\n# TYPE vllm:num_requests_waiting gauge\n",
                  "vllm:num_requests_waiting", labels, " 0.0\n");
  absl::StrAppend(&text,
                  "# HELP vllm:nixl_num_kv_expired_reqs_total Number of requests whose "
                  "KV blocks expired at the producer before a consumer read them.\n"
                  "# TYPE vllm:nixl_num_kv_expired_reqs_total counter\n",
                  "vllm:nixl_num_kv_expired_reqs_total", labels, " ", state.kv.expired_total(),
                  ".0\n");
  absl::StrAppend(&text,
                  "# HELP vllm:nixl_num_failed_transfers_total Number of failed NIXL KV "
                  "Cache transfers.\n"
                  "# TYPE vllm:nixl_num_failed_transfers_total counter\n",
                  "vllm:nixl_num_failed_transfers_total", labels, " ",
                  state.failed_transfers.load(), ".0\n");
  if (state.prefix_cache.enabled()) {
    absl::StrAppend(&text,
                    "# HELP vllm:prefix_cache_queries_total Prompt tokens looked up in the "
                    "prefix cache.\n# TYPE vllm:prefix_cache_queries_total counter\n",
                    "vllm:prefix_cache_queries_total", labels, " ",
                    state.prefix_cache.queried_tokens(), ".0\n");
    absl::StrAppend(&text,
                    "# HELP vllm:prefix_cache_hits_total Prompt tokens found in the prefix "
                    "cache.\n# TYPE vllm:prefix_cache_hits_total counter\n",
                    "vllm:prefix_cache_hits_total", labels, " ", state.prefix_cache.hit_tokens(),
                    ".0\n");
  }
  return text;
}

// Serves `handler`'s answer and records the exchange.
template <typename Handler>
httplib::Server::Handler Recorded(EngineState& state, Handler handler) {
  return [&state, handler](const httplib::Request& req, httplib::Response& res) {
    const uint64_t seq = BeginRecord(state, req);
    handler(req, res);
    if (res.status == -1) res.status = 200;
    FinishRecord(state, seq, res.status, RequestEnd::kComplete);
  };
}

}  // namespace

bool Authorized(const EngineState& state, const httplib::Request& req) {
  if (state.options.api_key.empty()) return true;
  return req.get_header_value("Authorization") == absl::StrCat("Bearer ", state.options.api_key);
}

void AddServiceRoutes(httplib::Server& server, EngineState& state) {
  auto health =
      Recorded(state, [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  server.Get("/health", health);
  server.Get("/ping", health);
  server.Post("/ping", health);
  server.Get("/version", Recorded(state, [&state](const httplib::Request&, httplib::Response& res) {
               res.set_content(Dump(OrderedJson{{"version", state.options.vllm_version}}),
                               "application/json");
             }));
  server.Get("/v1/models",
             Recorded(state, [&state](const httplib::Request& req, httplib::Response& res) {
               if (!Authorized(state, req)) {
                 res.status = 401;
                 res.set_content("{\"error\":\"Unauthorized\"}", "application/json");
                 return;
               }
               res.set_content(
                   Dump(ModelList(state.options.model, state.options.max_model_len, state.created)),
                   "application/json");
             }));
  server.Get("/metrics", Recorded(state, [&state](const httplib::Request&, httplib::Response& res) {
               res.set_content(MetricsText(state), "text/plain; version=0.0.4; charset=utf-8");
             }));
  server.Post(
      "/tokenize", Recorded(state, [&state](const httplib::Request& req, httplib::Response& res) {
        // The completion form {prompt} or the chat form {messages}: the ids
        // the engine would compute (a text tokenized, token ids as given).
        const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
        const Api api =
            body.is_object() && body.contains("messages") ? Api::kChat : Api::kCompletions;
        const ParsedRequest parsed = ParseInferenceRequest(
            api, "application/json", req.body, state.options.model, state.options.max_model_len);
        if (parsed.error) {
          res.status = parsed.error->status;
          res.set_content(ErrorBody(*parsed.error), "application/json");
          return;
        }
        const std::vector<uint32_t>& tokens = parsed.request.prompt_ids;
        res.set_content(nlohmann::json{{"count", tokens.size()},
                                       {"max_model_len", state.options.max_model_len},
                                       {"tokens", tokens}}
                            .dump(),
                        "application/json");
      }));
}

}  // namespace narwhal::sim
