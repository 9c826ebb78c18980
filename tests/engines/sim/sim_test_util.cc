#include "tests/engines/sim/sim_test_util.h"

#include "absl/time/clock.h"

namespace narwhal::testing {

JsonReply PostJson(const SimProcess& sim, const std::string& path,
                   const nlohmann::json& body, const httplib::Headers& headers,
                   absl::Duration read_timeout) {
  JsonReply reply;
  httplib::Client client(sim.host(), sim.port());
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(absl::ToChronoMicroseconds(read_timeout));
  httplib::Result result =
      client.Post(path, headers, body.dump(), "application/json");
  if (!result) return reply;
  reply.status = result->status;
  reply.headers = result->headers;
  reply.body = result->body;
  reply.json = nlohmann::json::parse(result->body, nullptr, false);
  return reply;
}

HttpCapture PostStream(const SimProcess& sim, const std::string& path,
                       const nlohmann::json& body, HttpCaptureOptions options) {
  return PostCapture(sim.host(), sim.port(), path, body.dump(), options);
}

HttpCaptureOptions WithRequestId(const std::string& id) {
  HttpCaptureOptions options;
  options.headers = {{"X-Request-Id", id}};
  return options;
}

std::vector<nlohmann::json> JsonEvents(const HttpCapture& capture) {
  std::vector<nlohmann::json> events;
  for (const std::string& event : capture.data_events()) {
    events.push_back(nlohmann::json::parse(event, nullptr, false));
  }
  return events;
}

std::string StreamText(const HttpCapture& capture) {
  std::string text;
  for (const nlohmann::json& event : JsonEvents(capture)) {
    if (!event.is_object() || !event.contains("choices")) continue;
    for (const nlohmann::json& choice : event["choices"]) {
      if (choice.contains("text")) text += choice["text"].get<std::string>();
      if (choice.contains("delta") && choice["delta"].contains("content") &&
          choice["delta"]["content"].is_string()) {
        text += choice["delta"]["content"].get<std::string>();
      }
    }
  }
  return text;
}

nlohmann::json ChatBody(const std::string& content, int max_tokens,
                        bool stream) {
  return {{"model", kSimModel},
          {"messages", {{{"role", "user"}, {"content", content}}}},
          {"max_tokens", max_tokens},
          {"stream", stream}};
}

nlohmann::json CompletionBody(const std::string& prompt, int max_tokens,
                              bool stream) {
  return {{"model", kSimModel},
          {"prompt", prompt},
          {"max_tokens", max_tokens},
          {"stream", stream}};
}

nlohmann::json PrefillBody(nlohmann::json body) {
  body["stream"] = false;
  body.erase("stream_options");
  body["max_tokens"] = 1;
  if (body.contains("max_completion_tokens")) body["max_completion_tokens"] = 1;
  body.erase("min_tokens");
  body["kv_transfer_params"] = {{"do_remote_decode", true},
                                {"do_remote_prefill", false},
                                {"remote_engine_id", nullptr},
                                {"remote_block_ids", nullptr},
                                {"remote_host", nullptr},
                                {"remote_port", nullptr}};
  return body;
}

std::optional<nlohmann::json> WaitForRecord(
    SimProcess& sim, const std::string& request_id,
    const std::function<bool(const nlohmann::json&)>& pred,
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  do {
    absl::StatusOr<nlohmann::json> records = sim.Requests();
    if (records.ok()) {
      for (const nlohmann::json& record : *records) {
        const nlohmann::json& headers = record["headers"];
        if (headers.value("x-request-id", "") == request_id && pred(record)) {
          return record;
        }
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < deadline);
  return std::nullopt;
}

}  // namespace narwhal::testing
