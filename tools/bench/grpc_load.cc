// gRPC load: narwhal.v1.Inference/Generate with the callback client API
// (one ClientReadReactor per call, no thread per stream), spread over
// Options::grpc_channels HTTP/2 connections. gRPC runs the reactions on its
// own threads; each worker (Slot) has at most one call or one back-off
// alarm pending, so its Tally is only touched by one reaction at a time.
#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "narwhal/v1/inference.grpc.pb.h"
#include "tools/bench/load.h"

namespace narwhal::bench {
namespace {

using narwhal::v1::GenerateRequest;
using narwhal::v1::GenerateResponse;
using narwhal::v1::Inference;


std::chrono::system_clock::time_point WallDeadline(Clock::time_point at) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(at - Clock::now());
}

class Slot;

struct Run {
  const Options& options;
  Bodies bodies;
  Window window;
  std::mutex mu;
  std::condition_variable idle;
  int active = 0;

  void SlotDone() {
    std::lock_guard<std::mutex> lock(mu);
    if (--active == 0) idle.notify_all();
  }
};

// One Generate call. Owns itself from Begin() until OnDone.
class Call : public grpc::ClientReadReactor<GenerateResponse> {
 public:
  Call(Slot* slot, Run& run, long long n);
  void Begin(const std::shared_ptr<Call>& self, Inference::Stub* stub) {
    self_ = self;
    stub->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  Slot* slot_;
  Run& run_;
  grpc::ClientContext context_;
  GenerateRequest request_;
  GenerateResponse response_;
  Clock::time_point start_;
  bool first_ = false;
  bool final_ = false;
  std::shared_ptr<Call> self_;
};

class Slot {
 public:
  Slot(Run& run, int index, Inference::Stub* stub) : run_(run), index_(index), stub_(stub) {}

  void Start() {
    const Options& o = run_.options;
    if (o.ramp_s <= 0) return Next();
    alarm_.Set(WallDeadline(run_.window.start +
                            std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(o.ramp_s * index_ / o.concurrency))),
               [this](bool) { Next(); });
  }

  // Starts the next call, or retires the slot once the window is closed.
  void Next() {
    if (!run_.window.open()) return run_.SlotDone();
    auto call = std::make_shared<Call>(this, run_, run_.window.next_request++);
    {
      std::lock_guard<std::mutex> lock(mu_);
      current_ = call;
    }
    call->Begin(call, stub_);
    // Closes the race with CancelCurrent() between the check above and here.
    if (!run_.window.open()) call->Cancel();
  }

  void Finished(const grpc::Status& status, bool first, bool final) {
    if (!run_.window.open()) {
      ++tally_.cut;
      if (!first) ++tally_.cut_waiting;
      return run_.SlotDone();
    }
    if (status.ok() && first && final) {
      ++tally_.ok;
      return Next();
    }
    tally_.Fail(status.ok() ? (first ? "stream ended without a Final message"
                                     : "stream ended without a generated token")
                            : "gRPC status " + std::to_string(status.error_code()) + ": " +
                                  status.error_message());
    alarm_.Set(WallDeadline(Clock::now() + kFailureBackoff), [this](bool) { Next(); });
  }

  // From the controlling thread once the window closed.
  void CancelCurrent() {
    std::shared_ptr<Call> call;
    {
      std::lock_guard<std::mutex> lock(mu_);
      call = current_;
    }
    if (call) call->Cancel();
  }

  Tally& tally() { return tally_; }

 private:
  Run& run_;
  const int index_;
  Inference::Stub* stub_;
  grpc::Alarm alarm_;
  Tally tally_;
  std::mutex mu_;
  std::shared_ptr<Call> current_;
};

Call::Call(Slot* slot, Run& run, long long n) : slot_(slot), run_(run), start_(Clock::now()) {
  const Options& o = run.options;
  request_.set_model(o.model);
  if (o.chat) {
    auto* message = request_.mutable_messages()->add_messages();
    message->set_role("user");
    message->set_content(run.bodies.Text(n));
  } else {
    request_.set_prompt(run.bodies.Text(n));
  }
  request_.set_max_tokens(static_cast<uint32_t>(o.max_tokens));
  request_.set_request_id("bench-" + std::to_string(n));
}

void Call::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone follows
  if (response_.has_delta()) {
    if (run_.window.open()) {
      ++slot_->tally().frames;
      if (!first_) slot_->tally().ttft_s.push_back(Seconds(Clock::now() - start_));
    }
    first_ = true;
  } else if (response_.has_final()) {
    final_ = true;
  }
  StartRead(&response_);
}

void Call::OnDone(const grpc::Status& status) {
  std::shared_ptr<Call> keep = std::move(self_);  // this call may die with `keep`
  slot_->Finished(status, first_, final_);
}

// Samples how late a 10 ms alarm fires on gRPC's callback threads, which
// also run every reaction: a backed-up client shows up here.
class LagProbe {
 public:
  explicit LagProbe(Run& run) : run_(run) {}
  Tally& tally() { return tally_; }
  void Start() {
    next_ = Clock::now();
    Arm();
  }

 private:
  void Arm() {
    if (!run_.window.open()) return run_.SlotDone();
    next_ += kLagProbeInterval;
    alarm_.Set(WallDeadline(next_), [this](bool) {
      const auto now = Clock::now();
      tally_.loop_lag_s.push_back(Seconds(now - next_));
      if (now - next_ > kLagProbeInterval) next_ = now;  // no catch-up bursts
      Arm();
    });
  }
  Run& run_;
  Tally tally_;
  grpc::Alarm alarm_;
  Clock::time_point next_;
};

}  // namespace

bool RunGrpcLoad(const Options& o, Meter& meter, RunResult* result, std::string* /*error*/) {
  auto run = std::make_unique<Run>(o, Bodies(o));
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<Inference::Stub>> stubs;
  for (int i = 0; i < o.grpc_channels; ++i) {
    grpc::ChannelArguments args;
    // Distinct arguments and a local subchannel pool: one connection each.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("narwhal.bench.channel", i);
    channels.push_back(
        grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(Inference::NewStub(channels.back()));
  }
  std::vector<std::unique_ptr<Slot>> slots;
  for (int i = 0; i < o.concurrency; ++i) {
    slots.push_back(std::make_unique<Slot>(*run, i, stubs[i % stubs.size()].get()));
  }

  run->window.start = Clock::now();
  run->window.end = run->window.start + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(o.duration_s));
  auto probe = std::make_unique<LagProbe>(*run);
  run->active = o.concurrency + 1;  // the slots and the probe
  meter.Start();
  for (auto& slot : slots) slot->Start();
  probe->Start();

  std::this_thread::sleep_until(run->window.end);
  run->window.stopping = true;
  meter.Stop();
  const auto drain_start = Clock::now();
  for (auto& slot : slots) slot->CancelCurrent();
  bool drained;
  {
    std::unique_lock<std::mutex> lock(run->mu);
    drained = run->idle.wait_for(lock, kDrainLimit, [&] { return run->active == 0; });
  }
  result->drain_s = Seconds(Clock::now() - drain_start);
  for (auto& slot : slots) result->tally.Merge(slot->tally());
  result->tally.Merge(probe->tally());
  if (!drained) {
    // Reactions may still run: keep everything they touch alive until exit.
    std::fprintf(stderr, "narwhal-bench: %d calls did not end within %.0f s\n", run->active,
                 std::chrono::duration<double>(kDrainLimit).count());
    run.release();
    probe.release();
    for (auto& slot : slots) slot.release();
    for (auto& stub : stubs) stub.release();
  }
  return true;
}

}  // namespace narwhal::bench
