// GrpcAsyncCall: the base of one call of the gRPC door's async API
// (server/grpc/inference_service.h) and the tags its operations complete with.
//
// Each operation started on the call (the request slot, a write, the finish,
// the done notification) passes Hold(op) as its completion-queue tag: the tag
// names the call and the operation, and keeps the call alive until the
// operation's completion has been handled — whoever polls the queue calls
// Complete(tag, ok), which runs React(op, ok) and then drops that reference.
// At most one operation of each kind is in flight at a time.
#ifndef NARWHAL_SERVER_GRPC_GRPC_ASYNC_CALL_H_
#define NARWHAL_SERVER_GRPC_GRPC_ASYNC_CALL_H_

#include <array>
#include <cstddef>
#include <memory>

namespace narwhal::server {

class GrpcAsyncCall : public std::enable_shared_from_this<GrpcAsyncCall> {
 public:
  enum class Op { kRequest = 0, kWrite, kFinish, kDone };
  static constexpr size_t kOps = 4;

  struct Tag {
    GrpcAsyncCall* call = nullptr;
    Op op = Op::kRequest;
  };

  virtual ~GrpcAsyncCall() = default;

  // The operation behind `tag` (from a completion queue) completed.
  static void Complete(void* tag, bool ok);
  // Which operation a tag from a completion queue stands for.
  static Op OpOf(void* tag) { return static_cast<Tag*>(tag)->op; }

 protected:
  GrpcAsyncCall();
  // The tag for starting `op`; holds the call until the op completes.
  void* Hold(Op op);
  // Drops the reference `op`'s tag holds, for an op that will never complete
  // (the done notification of a call that never started).
  void Release(Op op) { keep_[static_cast<size_t>(op)].reset(); }
  virtual void React(Op op, bool ok) = 0;

 private:
  std::array<Tag, kOps> tags_;
  std::array<std::shared_ptr<GrpcAsyncCall>, kOps> keep_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_GRPC_ASYNC_CALL_H_
