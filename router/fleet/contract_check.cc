#include "router/fleet/contract_check.h"

#include <nlohmann/json.hpp>

#include "engines/json_limits.h"

namespace narwhal::router {
namespace {

using json = nlohmann::json;

std::string Failure(const engines::ControlResponse& r, const std::string& what) {
  if (r.status == 0) return what + ": " + r.error;
  return what + ": HTTP " + std::to_string(r.status);
}

// The served model's card from /v1/models, or null (with *why set).
engines::Awaitable<json> ModelCard(engines::AsyncEngineClient& client, engines::EngineTarget engine,
                                   const Settings& settings, const std::string& model,
                                   std::string* why) {
  const engines::ControlResponse r =
      co_await client.Control(engine, "GET", "/v1/models", "", settings.engine.health_timeout_s);
  if (!r.ok()) {
    *why = Failure(r, "GET /v1/models");
    co_return nullptr;
  }
  json parsed = engines::ParseJson(r.body);
  if (!parsed.is_object() || !parsed.contains("data") || !parsed["data"].is_array()) {
    *why = "GET /v1/models: not an OpenAI model list";
    co_return nullptr;
  }
  std::string served;
  for (const json& card : parsed["data"]) {
    if (!card.is_object() || !card.contains("id") || !card["id"].is_string()) continue;
    if (card["id"] == model) co_return card;
    served += (served.empty() ? "" : ", ") + card["id"].get<std::string>();
  }
  *why = "model " + model + " is not served (engine serves: " + (served.empty() ? "none" : served) +
         ")";
  co_return nullptr;
}

}  // namespace

engines::Awaitable<std::string> CheckReach(engines::AsyncEngineClient& client,
                                           engines::EngineTarget engine, const Settings& settings) {
  const engines::ControlResponse r =
      co_await client.Control(engine, "GET", "/health", "", settings.engine.health_timeout_s);
  co_return r.status == 200 ? "" : Failure(r, "GET /health");
}

engines::Awaitable<std::string> CheckContract(engines::AsyncEngineClient& client,
                                              engines::EngineTarget engine,
                                              const Settings& settings) {
  if (!settings.engine_contract) co_return "";
  const EngineContract& c = *settings.engine_contract;
  if (c.connector != settings.engine.connector) {
    co_return "pinned connector " + c.connector + " differs from engine.connector " +
        settings.engine.connector;
  }
  const engines::ControlResponse v =
      co_await client.Control(engine, "GET", "/version", "", settings.engine.health_timeout_s);
  if (!v.ok()) co_return Failure(v, "GET /version");
  json version = engines::ParseJson(v.body);
  if (!version.is_object() || !version.contains("version") || !version["version"].is_string()) {
    co_return "GET /version: no version string";
  }
  if (version["version"] != c.vllm_version) {
    co_return "vllm_version is " + version["version"].get<std::string>() + ", pinned " +
        c.vllm_version;
  }
  const std::string model = c.model.value_or(settings.model);
  std::string why;
  json card = co_await ModelCard(client, engine, settings, model, &why);
  if (card.is_null()) co_return why;
  if (c.max_model_len) {
    if (!card.contains("max_model_len") || !card["max_model_len"].is_number_integer() ||
        card["max_model_len"].get<long long>() != *c.max_model_len) {
      co_return "max_model_len is " +
          (card.contains("max_model_len") ? card["max_model_len"].dump() : std::string("absent")) +
          ", pinned " + std::to_string(*c.max_model_len);
    }
  }
  if (c.system_fingerprint) {
    const json body = {{"model", model}, {"prompt", "narwhal contract check"}, {"max_tokens", 1}};
    const engines::ControlResponse r = co_await client.Control(
        engine, "POST", "/v1/completions", body.dump(), settings.engine.health_timeout_s);
    if (!r.ok()) co_return Failure(r, "POST /v1/completions (fingerprint)");
    json parsed = engines::ParseJson(r.body);
    const std::string got = parsed.is_object() && parsed.contains("system_fingerprint") &&
                                    parsed["system_fingerprint"].is_string()
                                ? parsed["system_fingerprint"].get<std::string>()
                                : "absent";
    if (got != *c.system_fingerprint) {
      co_return "system_fingerprint is " + got + ", pinned " + *c.system_fingerprint;
    }
  }
  co_return "";
}

engines::Awaitable<std::string> CheckModel(engines::AsyncEngineClient& client,
                                           engines::EngineTarget engine, const Settings& settings) {
  std::string why;
  const json card = co_await ModelCard(client, engine, settings, settings.model, &why);
  co_return card.is_null() ? why : "";
}

engines::Awaitable<std::string> CheckLifecycle(engines::AsyncEngineClient& client,
                                               engines::EngineTarget engine,
                                               const Settings& settings) {
  if (std::string why = co_await CheckReach(client, engine, settings); !why.empty()) co_return why;
  if (std::string why = co_await CheckContract(client, engine, settings); !why.empty())
    co_return why;
  co_return co_await CheckModel(client, engine, settings);
}

}  // namespace narwhal::router
