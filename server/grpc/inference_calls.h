// The calls of narwhal.v1.Inference on the gRPC door
// (server/grpc/inference_service.h): Generate (a stream of GenerateResponse)
// and Complete (one CompleteResponse). Everything of a call — admission
// once its one request message is in, the router request, every write and
// the status — happens on its client connection's loop.
#ifndef NARWHAL_SERVER_GRPC_INFERENCE_CALLS_H_
#define NARWHAL_SERVER_GRPC_INFERENCE_CALLS_H_

#include <memory>

#include "server/grpc/h2_call.h"

namespace narwhal::server {

class InferenceService;

// Generate (`stream`) or Complete on `call`.
std::unique_ptr<H2CallHandler> NewInferenceCall(InferenceService& service,
                                                const std::shared_ptr<H2Call>& call, bool stream);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_INFERENCE_CALLS_H_
