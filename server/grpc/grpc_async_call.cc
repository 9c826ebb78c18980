#include "server/grpc/grpc_async_call.h"

#include <utility>

namespace narwhal::server {

GrpcAsyncCall::GrpcAsyncCall() {
  for (size_t i = 0; i < kOps; ++i) tags_[i] = Tag{this, static_cast<Op>(i)};
}

void* GrpcAsyncCall::Hold(Op op) {
  const size_t i = static_cast<size_t>(op);
  keep_[i] = shared_from_this();
  return &tags_[i];
}

void GrpcAsyncCall::Complete(void* tag, bool ok) {
  Tag* t = static_cast<Tag*>(tag);
  // Released after the reaction: it may start the next op of the same kind.
  std::shared_ptr<GrpcAsyncCall> keep = std::move(t->call->keep_[static_cast<size_t>(t->op)]);
  t->call->React(t->op, ok);
}

}  // namespace narwhal::server
