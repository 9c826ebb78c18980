#include "tests/soak/grpc_client.h"

#include <grpcpp/grpcpp.h>

#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "google/rpc/status.pb.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "tests/soak/text_check.h"

namespace narwhal::soak {
namespace {

// Cancels registered calls at their abort time, from one thread.
class Canceller {
 public:
  Canceller() : thread_([this] { Loop(); }) {}
  ~Canceller() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      cv_.Signal();
    }
    thread_.join();
  }

  uint64_t Add(grpc::ClientContext* context, absl::Time at) {
    absl::MutexLock lock(&mu_);
    const uint64_t id = ++next_id_;
    calls_[id] = Call{context, false};
    due_.emplace(at, id);
    cv_.Signal();
    return id;
  }

  // Forgets the call (its context may go away after this); true when it
  // was cancelled.
  bool Remove(uint64_t id) {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    const bool fired = it != calls_.end() && it->second.fired;
    if (it != calls_.end()) calls_.erase(it);
    return fired;
  }

 private:
  struct Call {
    grpc::ClientContext* context;
    bool fired;
  };

  void Loop() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      const absl::Time now = absl::Now();
      while (!due_.empty() && due_.begin()->first <= now) {
        auto call = calls_.find(due_.begin()->second);
        if (call != calls_.end() && !call->second.fired) {
          call->second.context->TryCancel();
          call->second.fired = true;
        }
        due_.erase(due_.begin());
      }
      const absl::Duration wait =
          due_.empty() ? absl::Milliseconds(100)
                       : std::min(absl::Milliseconds(100), due_.begin()->first - now);
      cv_.WaitWithTimeout(&mu_, wait);
    }
  }

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Call> calls_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, uint64_t> due_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

narwhal::v1::GenerateRequest ToProto(const RequestPlan& plan) {
  narwhal::v1::GenerateRequest req;
  req.set_model("Qwen/Qwen3-0.6B");
  if (plan.chat) {
    auto* m = req.mutable_messages()->add_messages();
    m->set_role("user");
    m->set_content(plan.prompt);
  } else {
    req.set_prompt(plan.prompt);
  }
  req.set_max_tokens(static_cast<uint32_t>(plan.max_tokens));
  req.set_request_id(plan.client_rid);
  return req;
}

void TakeStatus(const grpc::Status& status, const grpc::ClientContext& context,
                RequestRecord* r) {
  r->grpc_code = status.error_code();
  const auto& md = context.GetServerInitialMetadata();
  if (auto it = md.find("x-request-id"); it != md.end()) {
    r->rid = std::string(it->second.data(), it->second.size());
  }
  if (status.ok()) return;
  google::rpc::Status details;
  if (!status.error_details().empty() && details.ParseFromString(status.error_details())) {
    for (const auto& any : details.details()) {
      narwhal::v1::ErrorInfo info;
      if (!any.Is<narwhal::v1::ErrorInfo>() || !any.UnpackTo(&info)) continue;
      r->has_error = true;
      r->error_code = info.http_status();
      r->error_type = info.type();
      r->error_message = info.message();
      r->output_started = info.output_started();
      if (r->rid.empty()) r->rid = info.request_id();
    }
  }
}

}  // namespace

class GrpcClients::Impl {
 public:
  Impl(const std::string& target, int channels) {
    for (int i = 0; i < channels; ++i) {
      grpc::ChannelArguments args;
      // Distinct arguments: each channel gets its own connection.
      args.SetInt("narwhal.soak.channel", i);
      stubs_.push_back(narwhal::v1::Inference::NewStub(
          grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
    }
  }

  int channels() const { return static_cast<int>(stubs_.size()); }

  void Run(absl::Duration hard_timeout, RequestRecord* r) {
    const RequestPlan& plan = r->plan;
    auto& stub = *stubs_[static_cast<size_t>(plan.channel) % stubs_.size()];
    const narwhal::v1::GenerateRequest req = ToProto(plan);
    grpc::ClientContext context;
    r->sent = absl::Now();
    context.set_deadline(absl::ToChronoTime(r->sent + hard_timeout));
    uint64_t cancel_id = 0;
    if (plan.abort_after != absl::InfiniteDuration()) {
      cancel_id = canceller_.Add(&context, r->sent + plan.abort_after);
    }
    grpc::Status status;
    if (plan.stream) {
      auto reader = stub.Generate(&context, req);
      narwhal::v1::GenerateResponse response;
      while (reader->Read(&response)) {
        if (response.has_delta()) {
          if (r->saw_done) r->problems.push_back("delta after the final message");
          CheckText(response.delta().text(), r);
          if (!response.delta().text().empty()) ++r->tokens;
        } else if (response.has_final()) {
          if (r->saw_done) r->problems.push_back("second final message");
          r->saw_done = true;
        }
      }
      status = reader->Finish();
    } else {
      narwhal::v1::CompleteResponse response;
      status = stub.Complete(&context, req, &response);
      if (status.ok()) {
        r->saw_done = true;
        CheckText(response.text(), r);
        r->tokens = static_cast<int>(response.usage().completion_tokens());
      }
    }
    const bool cancelled = cancel_id != 0 && canceller_.Remove(cancel_id);
    r->elapsed = absl::Now() - r->sent;
    TakeStatus(status, context, r);
    if (cancelled && status.error_code() == grpc::StatusCode::CANCELLED) {
      r->aborted = true;
      return;
    }
    if (status.ok() || r->has_error) {
      r->complete = true;
      if (status.ok() && plan.stream && !r->saw_done) {
        r->problems.push_back("Generate ended OK without a final message");
      }
      return;
    }
    r->transport_error = absl::StrCat("gRPC status ", status.error_code(),
                                      " without ErrorInfo: ", status.error_message());
  }

 private:
  std::vector<std::unique_ptr<narwhal::v1::Inference::Stub>> stubs_;
  Canceller canceller_;
};

GrpcClients::GrpcClients(const std::string& target, int channels)
    : impl_(std::make_unique<Impl>(target, channels)) {}
GrpcClients::~GrpcClients() = default;
int GrpcClients::channels() const { return impl_->channels(); }
void GrpcClients::Run(absl::Duration hard_timeout, RequestRecord* record) {
  impl_->Run(hard_timeout, record);
}

}  // namespace narwhal::soak
