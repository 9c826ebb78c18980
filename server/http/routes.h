// HttpRoutes: what a client connection (server/http/connection.h) asks of
// the door's routes, so the connection deals only in HTTP framing and the
// routes only in OpenAI semantics (server/http/openai_shim.cc implements it).
//
// Called on the connection's loop; implementations are thread-safe (one
// instance serves every connection on every loop) and never block.
#ifndef NARWHAL_SERVER_HTTP_ROUTES_H_
#define NARWHAL_SERVER_HTTP_ROUTES_H_

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/verb.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engines/engine_client.h"
#include "router/request.h"
#include "router/response_sink.h"
#include "server/admission.h"
#include "server/http/responses.h"

namespace narwhal::server {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;

// A generation request either admitted (a router::Request to serve) or
// refused with a response (already journaled).
struct Admission {
  std::optional<router::Request> request;
  HttpResponse refusal;
};

class HttpRoutes {
 public:
  virtual ~HttpRoutes() = default;

  // Whether `method path` is served by the router core (POST
  // /v1/completions, POST /v1/chat/completions).
  virtual bool IsGeneration(boost::beast::http::verb method, std::string_view path) const = 0;
  // A complete request the router core does not serve (/health, /ready,
  // /metrics, /v1/models, unknown paths: 404).
  virtual HttpResponse Plain(const HttpRequest& request, std::string_view path) = 0;
  // A complete generation request: admitted (server/admission) into a
  // router::Request, or refused (401, 400, 404) and journaled.
  virtual Admission Admit(const HttpRequest& request, std::string_view path) = 0;
  // A request the connection refused before it was complete (400, 408, 413,
  // 431): `partial` holds what was parsed. Journaled when it names a
  // generation route.
  virtual HttpResponse Refuse(const HttpRequest& partial, std::string_view path,
                              Refusal refusal) = 0;
  // Runs an admitted request to its end on the calling coroutine's loop
  // (Router::Serve): the response goes to `sink`, whose Finish() has been
  // called when this completes.
  virtual engines::Awaitable<void> Serve(router::Request request,
                                         std::shared_ptr<router::ResponseSink> sink) = 0;
  // Shutting down: responses close their connections.
  virtual bool draining() const = 0;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_HTTP_ROUTES_H_
