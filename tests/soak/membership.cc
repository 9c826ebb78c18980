#include "tests/soak/membership.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "narwhal/admin/v1/admin.grpc.pb.h"

namespace narwhal::soak {

namespace pb = narwhal::admin::v1;

class MembershipDriver::Admin {
 public:
  explicit Admin(const std::string& target)
      : stub_(pb::Admin::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))) {}

  grpc::Status Add(const SoakEngine& e) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    pb::AddEngineRequest request;
    request.set_iid(e.iid);
    request.set_url(e.sim->url());
    request.set_role(e.role);
    pb::Engine response;
    return stub_->AddEngine(&context, request, &response);
  }

  grpc::Status Remove(const std::string& iid) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    pb::RemoveEngineRequest request;
    request.set_iid(iid);
    pb::Engine response;
    return stub_->RemoveEngine(&context, request, &response);
  }

 private:
  std::unique_ptr<pb::Admin::Stub> stub_;
};

absl::StatusOr<std::vector<SoakEngine>> StartChurnEngines(const SoakOptions& options,
                                                          std::mt19937_64& rng) {
  const std::vector<std::pair<std::string, std::string>> layout = {
      {"m-p0", "prefill"}, {"m-d0", "decode"}, {"m-b0", "both"}};
  std::vector<SoakEngine> engines;
  std::uniform_int_distribution<int> port(20000, 29999);
  for (const auto& [iid, role] : layout) {
    absl::Status last;
    for (int attempt = 0; attempt < 20 && (engines.empty() || engines.back().iid != iid);
         ++attempt) {
      absl::StatusOr<std::unique_ptr<testing::SimProcess>> sim = testing::SimProcess::Start(
          {"--port", absl::StrCat(port(rng)), "--engine-id", iid, "--role", role, "--model",
           "Qwen/Qwen3-0.6B", "--token-interval-ms", absl::StrCat(options.token_interval_ms),
           "--max-silence-s", "30"});
      if (!sim.ok()) {
        last = sim.status();  // most likely the port is taken: try another
        continue;
      }
      SoakEngine e;
      e.iid = iid;
      e.role = role;
      e.sim = std::move(*sim);
      engines.push_back(std::move(e));
    }
    if (engines.empty() || engines.back().iid != iid) {
      return absl::UnavailableError(absl::StrCat("cannot start engine ", iid, ": ", last.message()));
    }
  }
  return engines;
}

MembershipDriver::MembershipDriver(std::vector<SoakEngine> engines,
                                   const std::string& admin_target, uint64_t seed,
                                   StatesFn states)
    : engines_(std::move(engines)),
      in_fleet_(engines_.size(), false),
      admin_(std::make_unique<Admin>(admin_target)),
      rng_(seed ^ 0x6d656d62ULL),
      states_(std::move(states)) {}

MembershipDriver::~MembershipDriver() { Stop(); }

void MembershipDriver::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void MembershipDriver::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  for (size_t i = 0; i < engines_.size(); ++i) {
    if (in_fleet_[i]) Flip(i);
  }
}

bool MembershipDriver::Flip(size_t i) {
  const SoakEngine& e = engines_[i];
  const grpc::Status status = in_fleet_[i] ? admin_->Remove(e.iid) : admin_->Add(e);
  if (!status.ok()) {
    stats_.refused.push_back(absl::StrCat(in_fleet_[i] ? "RemoveEngine " : "AddEngine ", e.iid,
                                          ": ", status.error_message()));
    return false;
  }
  ++(in_fleet_[i] ? stats_.removed : stats_.added);
  in_fleet_[i] = !in_fleet_[i];
  return true;
}

void MembershipDriver::Loop() {
  std::uniform_int_distribution<int> pause_ms(1500, 3500);
  std::vector<bool> awaiting_join(engines_.size(), false);
  while (!stop_.load()) {
    const absl::Time until = absl::Now() + absl::Milliseconds(pause_ms(rng_));
    while (!stop_.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(50));
    if (stop_.load()) break;
    const std::map<std::string, std::string> states = states_();
    // An engine is flipped only once its last change settled: an added one
    // serving (its join checks passed), a removed one gone (drained).
    std::vector<size_t> settled;
    for (size_t i = 0; i < engines_.size(); ++i) {
      const auto it = states.find(engines_[i].iid);
      if (in_fleet_[i] && it != states.end() && it->second == "serving") {
        if (awaiting_join[i]) {
          ++stats_.joined;
          awaiting_join[i] = false;
        }
        settled.push_back(i);
      } else if (!in_fleet_[i] && it == states.end()) {
        settled.push_back(i);
      }
    }
    if (settled.empty()) continue;
    const size_t i = settled[std::uniform_int_distribution<size_t>(0, settled.size() - 1)(rng_)];
    const bool adding = !in_fleet_[i];
    if (Flip(i) && adding) awaiting_join[i] = true;
  }
}

}  // namespace narwhal::soak
