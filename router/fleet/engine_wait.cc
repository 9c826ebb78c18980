#include "router/fleet/engine_wait.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engines/run_blocking.h"
#include "router/common/log.h"

namespace narwhal::router {
namespace {

enum class State { kLoading, kUp, kFailed };

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1fs", s);
  return buf;
}

std::string Describe(const engines::ControlResponse& r, const std::string& what) {
  if (r.status == 0) return what + ": " + r.error;
  return what + ": HTTP " + std::to_string(r.status);
}

// One look at an engine: /health, then /v1/models. *why says what it answered
// when it is not up.
State Look(engines::AsyncEngineClient& client, const engines::Executor& executor,
           const engines::EngineTarget& target, const Settings& settings, std::string* why) {
  for (const char* path : {"/health", "/v1/models"}) {
    const engines::ControlResponse r = engines::RunBlocking(
        executor, client.Control(target, "GET", path, "", settings.engine.health_timeout_s));
    if (r.ok()) continue;
    *why = Describe(r, std::string("GET ") + path);
    return IsLoadingAnswer(r) ? State::kLoading : State::kFailed;
  }
  return State::kUp;
}

}  // namespace

bool IsLoadingAnswer(const engines::ControlResponse& response) {
  if (response.status == 503) return true;
  return response.status == 0 && response.error.find("connection refused") != std::string::npos;
}

EngineWaitResult WaitForEngines(const Settings& settings, engines::AsyncEngineClient& client,
                                const engines::Executor& executor, const Clock& clock,
                                const std::function<bool(double)>& sleep, double timeout_s,
                                double interval_s) {
  EngineWaitResult result;
  if (timeout_s <= 0 || settings.engines.empty()) return result;
  interval_s = std::max(interval_s, 0.01);
  const MonoTime started = clock.Now();
  const MonoTime deadline = started + engines::FromSeconds(timeout_s);
  std::vector<State> states(settings.engines.size(), State::kLoading);
  std::vector<std::string> why(settings.engines.size());
  LogInfo("preflight: waiting up to " + Seconds(timeout_s) + " for " +
          std::to_string(settings.engines.size()) + " engine(s) to finish loading");
  while (true) {
    ++result.rounds;
    for (size_t i = 0; i < settings.engines.size(); ++i) {
      if (states[i] != State::kLoading) continue;
      const EngineSettings& e = settings.engines[i];
      states[i] = Look(client, executor, {e.iid, e.url}, settings, &why[i]);
      const double at = engines::Seconds(clock.Now() - started);
      if (states[i] == State::kUp) {
        Log(LogLevel::kInfo, "preflight: engine " + e.iid + " is up after " + Seconds(at),
            {{"iid", e.iid}, {"waited_s", at}});
      } else if (states[i] == State::kFailed) {
        Log(LogLevel::kWarning,
            "preflight: engine " + e.iid + " answered but is not usable: " + why[i],
            {{"iid", e.iid}, {"detail", why[i]}});
      }
    }
    const bool loading =
        std::any_of(states.begin(), states.end(), [](State s) { return s == State::kLoading; });
    const MonoTime now = clock.Now();
    if (!loading || now >= deadline) break;
    const double left = engines::Seconds(deadline - now);
    if (!sleep(std::min(interval_s, left))) {
      result.interrupted = true;
      break;
    }
  }
  result.waited_s = engines::Seconds(clock.Now() - started);
  for (size_t i = 0; i < settings.engines.size(); ++i) {
    if (states[i] == State::kLoading) result.still_loading.push_back(settings.engines[i].iid);
  }
  result.settled = result.still_loading.empty();
  if (result.interrupted) {
    LogInfo("preflight: the wait for engines was interrupted after " + Seconds(result.waited_s));
  } else if (result.settled) {
    LogInfo("preflight: every engine answered after " + Seconds(result.waited_s));
  } else {
    std::string list;
    for (const std::string& iid : result.still_loading) list += (list.empty() ? "" : ", ") + iid;
    Log(LogLevel::kWarning,
        "preflight: gave up waiting after " + Seconds(result.waited_s) + "; still loading: " + list,
        {{"still_loading", result.still_loading}});
  }
  return result;
}

}  // namespace narwhal::router
