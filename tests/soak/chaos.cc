#include "tests/soak/chaos.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/soak/fault_menu.h"

namespace narwhal::soak {
namespace {

// At most this many engines frozen or dead at once: each role keeps an
// engine most of the time, so most requests still have somewhere to go.
constexpr int kMaxDisrupted = 2;
// A book is cleared before it nears its 1000-rule cap.
constexpr int kRulesBeforeClear = 40;

int Uniform(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("was killed by signal ", WTERMSIG(status));
  return absl::StrCat("ended with wait status ", status);
}

}  // namespace

ChaosDriver::ChaosDriver(std::vector<SoakEngine>* engines, uint64_t seed, PlacementFn placement)
    : engines_(engines), rng_(seed ^ 0xc4a05c4a05ull), placement_(std::move(placement)) {}

ChaosDriver::~ChaosDriver() { Stop(); }

void ChaosDriver::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void ChaosDriver::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void ChaosDriver::Loop() {
  absl::Time next_fault = absl::Now();
  absl::Time next_disruption = absl::Now() + absl::Seconds(1);
  while (!stop_.load()) {
    const absl::Time now = absl::Now();
    CheckExits();
    BringBack(now);
    states_ = placement_();
    ClearBooksOutOfPlacement();
    if (now >= next_fault) {
      InjectFault();
      next_fault = now + absl::Milliseconds(Uniform(rng_, 80, 250));
    }
    if (now >= next_disruption) {
      Disrupt(now);
      next_disruption = now + absl::Milliseconds(Uniform(rng_, 1500, 4000));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void ChaosDriver::CheckExits() {
  for (SoakEngine& e : *engines_) {
    if (e.state == EngineState::kDown || !e.sim->running()) continue;
    if (std::optional<int> status = e.sim->Wait(absl::ZeroDuration())) {
      stats_.problems.push_back(
          absl::StrCat("engine ", e.iid, " ", DescribeWait(*status), " on its own (a crash)"));
      e.state = EngineState::kDown;
      e.back_at = absl::Now() + absl::Seconds(1);
    }
  }
}

void ChaosDriver::BringBack(absl::Time now) {
  for (SoakEngine& e : *engines_) {
    if (e.state == EngineState::kUp || now < e.back_at) continue;
    if (e.state == EngineState::kStopped) {
      e.sim->Kill(SIGCONT);
      ++stats_.signals["SIGCONT"];
    } else {
      if (absl::Status s = e.sim->Restart(absl::Seconds(15)); !s.ok()) {
        stats_.problems.push_back(absl::StrCat("restart of ", e.iid, " failed: ", s.message()));
        e.back_at = now + absl::Seconds(1);
        continue;
      }
      ++stats_.signals["restart"];
      e.rules = 0;
    }
    e.state = EngineState::kUp;
    stats_.recoveries.emplace_back(e.iid, absl::Now());
  }
}

void ChaosDriver::ClearBooksOutOfPlacement() {
  for (SoakEngine& e : *engines_) {
    if (e.state != EngineState::kUp || e.rules == 0) continue;
    auto it = states_.find(e.iid);
    if (it == states_.end() || (it->second != "held" && it->second != "ejected")) continue;
    if (e.sim->ClearFaults().ok()) {
      e.rules = 0;
      ++stats_.books_cleared;
    }
  }
}

SoakEngine* ChaosDriver::PickUp(bool (*eligible)(const SoakEngine&), bool serving_only) {
  std::vector<SoakEngine*> up;
  for (SoakEngine& e : *engines_) {
    if (e.state != EngineState::kUp || !eligible(e)) continue;
    auto it = states_.find(e.iid);
    if (serving_only && (it == states_.end() || it->second != "serving")) continue;
    up.push_back(&e);
  }
  if (up.empty()) return nullptr;
  return up[static_cast<size_t>(Uniform(rng_, 0, static_cast<int>(up.size()) - 1))];
}

void ChaosDriver::InjectFault() {
  if (kind_round_.empty()) {
    kind_round_ = AllFaultKinds();
    std::shuffle(kind_round_.begin(), kind_round_.end(), rng_);
  }
  const std::string kind = kind_round_.back();
  const nlohmann::json rule = RandomFaultRule(kind, rng_);
  const std::string phase = rule["phase"];
  SoakEngine* e = PickUp(phase == "prefill"  ? +[](const SoakEngine& x) { return x.serves_prefill(); }
                         : phase == "decode" ? +[](const SoakEngine& x) { return x.serves_decode(); }
                                             : +[](const SoakEngine&) { return true; },
                         /*serving_only=*/true);
  if (e == nullptr) return;  // try this kind again next time
  kind_round_.pop_back();
  if (e->rules >= kRulesBeforeClear) {
    if (e->sim->ClearFaults().ok()) e->rules = 0;
  }
  if (absl::Status s = e->sim->SetFaults(nlohmann::json::array({rule})); !s.ok()) {
    ++stats_.fault_posts_failed;
    return;
  }
  ++e->rules;
  ++stats_.faults[kind];
}

int ChaosDriver::Disrupted() const {
  int n = 0;
  for (const SoakEngine& e : *engines_) n += e.state != EngineState::kUp;
  return n;
}

void ChaosDriver::Disrupt(absl::Time now) {
  if (Disrupted() >= kMaxDisrupted) return;
  SoakEngine* e = PickUp(+[](const SoakEngine&) { return true; }, /*serving_only=*/false);
  if (e == nullptr) return;
  if (action_round_.empty()) {
    // Freezes twice as often as each kind of kill.
    action_round_ = {"SIGSTOP", "SIGSTOP", "SIGKILL", "SIGTERM"};
    std::shuffle(action_round_.begin(), action_round_.end(), rng_);
  }
  const std::string action = action_round_.back();
  action_round_.pop_back();
  ++stats_.signals[action];
  stats_.disruptions.emplace_back(e->iid, now);
  if (action == "SIGSTOP") {
    e->sim->Kill(SIGSTOP);
    e->state = EngineState::kStopped;
    e->back_at = now + absl::Milliseconds(Uniform(rng_, 500, 3000));
    return;
  }
  e->sim->Kill(action == "SIGKILL" ? SIGKILL : SIGTERM);
  const std::optional<int> status = e->sim->Wait(absl::Seconds(15));
  if (!status.has_value()) {
    stats_.problems.push_back(absl::StrCat("engine ", e->iid, " still runs 15 s after ", action));
  } else if (action == "SIGTERM" && !(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)) {
    stats_.problems.push_back(
        absl::StrCat("engine ", e->iid, " ", DescribeWait(*status), " on SIGTERM"));
  }
  e->state = EngineState::kDown;
  e->back_at = absl::Now() + absl::Milliseconds(Uniform(rng_, 500, 2500));
}

absl::Status ChaosDriver::Restore() {
  CheckExits();
  for (SoakEngine& e : *engines_) e.back_at = absl::InfinitePast();
  BringBack(absl::Now());
  absl::Status result;
  for (SoakEngine& e : *engines_) {
    if (e.state != EngineState::kUp) {
      result = absl::UnavailableError(absl::StrCat("engine ", e.iid, " did not come back"));
      continue;
    }
    if (absl::Status s = e.sim->ClearFaults(); !s.ok()) result = s;
    e.rules = 0;
  }
  return result;
}

}  // namespace narwhal::soak
