#include "tests/soak/load.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/soak/http_client.h"

namespace narwhal::soak {
namespace {

constexpr int kGrpcChannels = 4;

const char* const kWords[] = {"narwhal", "tusk",  "arctic", "pod",    "whale", "ice",
                              "ocean",   "sound", "deep",   "migrate", "krill", "fjord"};

std::string Prompt(std::mt19937_64& rng) {
  const int words = std::uniform_int_distribution<int>(3, 120)(rng);
  std::string prompt = "Tell me about";
  for (int i = 0; i < words; ++i) {
    absl::StrAppend(&prompt, " ", kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))]);
  }
  return prompt;
}

// Refused at once: admission (429) or no engine for a role (503).
bool Refused(const RequestRecord& r) {
  return r.http_status == 429 || r.http_status == 503 || r.grpc_code == 8 ||  // RESOURCE_EXHAUSTED
         (r.grpc_code == 14 && r.error_code == 503);
}

}  // namespace

LoadGenerator::LoadGenerator(const SoakOptions& options, int http_port,
                             const std::string& grpc_target)
    : options_(options), http_port_(http_port), grpc_(grpc_target, kGrpcChannels) {}

LoadGenerator::~LoadGenerator() { Stop(); }

RequestPlan LoadGenerator::Plan(std::mt19937_64& rng, int worker, uint64_t n) const {
  std::uniform_real_distribution<double> unit(0, 1);
  RequestPlan plan;
  plan.door = unit(rng) < options_.grpc_share ? Door::kGrpc : Door::kHttp;
  plan.chat = unit(rng) < 0.5;
  plan.stream = unit(rng) < options_.stream_share;
  plan.max_tokens =
      std::uniform_int_distribution<int>(options_.min_tokens, options_.max_tokens)(rng);
  plan.prompt = Prompt(rng);
  plan.client_rid = absl::StrCat("soak-", options_.seed, "-", worker, "-", n);
  plan.channel = worker % kGrpcChannels;
  if (unit(rng) < options_.abort_share) {
    // Anywhere from before the prefill ends to deep into the decode.
    plan.abort_after = absl::Milliseconds(std::uniform_int_distribution<int>(0, 2000)(rng));
  }
  return plan;
}

RequestRecord LoadGenerator::RunOne(const RequestPlan& plan) {
  RequestRecord record;
  record.plan = plan;
  if (plan.door == Door::kHttp) {
    RunHttpRequest(http_port_, kClientHardTimeout, &record);
  } else {
    grpc_.Run(kClientHardTimeout, &record);
  }
  return record;
}

void LoadGenerator::Start() {
  per_worker_.resize(static_cast<size_t>(options_.streams));
  for (int i = 0; i < options_.streams; ++i) {
    threads_.emplace_back([this, i] { Worker(i); });
  }
}

void LoadGenerator::Worker(int index) {
  std::mt19937_64 rng(options_.seed * 1000003u + static_cast<uint64_t>(index));
  std::vector<RequestRecord>& mine = per_worker_[static_cast<size_t>(index)];
  // Spread the first requests over a second, as clients arrive.
  absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(0, 1000)(rng)));
  for (uint64_t n = 0; !stop_.load(); ++n) {
    const RequestPlan plan = Plan(rng, index, n);
    started_.fetch_add(1);
    mine.push_back(RunOne(plan));
    finished_.fetch_add(1);
    // A refused client backs off as a real one would, so a refusal sheds
    // load rather than spinning; others pause a moment.
    const int pause_ms = Refused(mine.back())
                             ? std::uniform_int_distribution<int>(250, 750)(rng)
                             : std::uniform_int_distribution<int>(0, 20)(rng);
    absl::SleepFor(absl::Milliseconds(pause_ms));
  }
}

void LoadGenerator::Stop() {
  stop_.store(true);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

std::vector<RequestRecord> LoadGenerator::TakeRecords() {
  std::vector<RequestRecord> all;
  for (auto& records : per_worker_) {
    for (RequestRecord& r : records) all.push_back(std::move(r));
    records.clear();
  }
  return all;
}

}  // namespace narwhal::soak
