// The calls of the gRPC door's async service (server/grpc/inference_service.h):
// Generate (a stream of GenerateResponse) and Complete (one CompleteResponse).
//
// A call begins as a request slot opened on one loop's completion queue.
// When gRPC puts a call in it (on the acceptor thread) the slot opens its
// successor and hands itself to its loop; from then on everything of the call
// — admission, the router request, every write and the finish — happens on
// that loop's thread.
#ifndef NARWHAL_SERVER_GRPC_INFERENCE_CALLS_H_
#define NARWHAL_SERVER_GRPC_INFERENCE_CALLS_H_

namespace narwhal::server {

class InferenceService;

// Opens one request slot of Generate (`stream`) or Complete on loop `loop`.
void OpenInferenceSlot(InferenceService& service, int loop, bool stream);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_INFERENCE_CALLS_H_
