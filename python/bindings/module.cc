// narwhal._core: the C++ half of the narwhal Python package.
//
// Low-level and private: narwhal.engines.client wraps it into the public
// EngineClient (JSON in and out, iterators, coroutines, EngineError), and
// narwhal.engines.connector re-exports PrefillResult. Blocking waits release
// the GIL and check for signals every kWaitSlice; a signal's exception (a
// KeyboardInterrupt) cancels the leg first (B19).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "engines/api.h"
#include "engines/engine_failure.h"
#include "python/bindings/engine_calls.h"
#include "python/bindings/waker.h"
#include "server/status_table.h"

namespace narwhal::python {
namespace {

namespace py = pybind11;
using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kWaitSlice = 50ms;
// How long a cancelled leg may take to unwind before the wait gives up on it
// (it closes its socket within one loop turn).
constexpr auto kCancelBound = 5s;

engines::Api ParseEndpoint(const std::string& endpoint) {
  if (endpoint == engines::ApiPath(engines::Api::kCompletions)) return engines::Api::kCompletions;
  if (endpoint == engines::ApiPath(engines::Api::kChatCompletions)) {
    return engines::Api::kChatCompletions;
  }
  throw py::value_error("endpoint must be \"/v1/completions\" or \"/v1/chat/completions\" (got \"" +
                        endpoint + "\")");
}

json ParseBody(const std::string& text) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw py::value_error("the request is not valid JSON");
  if (!body.is_object()) throw py::type_error("the request must be a JSON object (a dict)");
  return body;
}

py::object LoadJson(const std::string& text) {
  return py::module_::import("json").attr("loads")(py::bytes(text));
}

double CheckSeconds(const char* name, double value, bool zero_ok) {
  if (!std::isfinite(value) || value < 0 || (!zero_ok && value == 0) || value > 1e7) {
    throw py::value_error(std::string(name) + " must be a finite number of seconds " +
                          (zero_ok ? ">= 0" : "> 0") + " and at most 1e7");
  }
  return value;
}

py::dict FailureDict(const engines::EngineFailure& f) {
  py::dict d;
  d["phase"] = std::string(engines::PhaseName(f.phase));
  d["status"] = server::FailureStatus(f);  // the one status table
  d["reason"] = std::string(engines::FailureReasonName(f.reason));
  d["detail"] = f.detail;
  d["transient"] = f.transient;
  d["breaker_class"] = std::string(engines::BreakerClassName(f.breaker_class));
  d["engine_status"] = f.engine_status;
  d["engine"] = f.iid;
  return d;
}

// Waits for `call` (ready, or with `until_finished` ended), at most
// `timeout_s` when given. True when it happened. Checks for signals between
// slices; when a handler raises, the leg is cancelled, awaited, and the
// exception propagates.
bool WaitInterruptibly(Call& call, std::optional<double> timeout_s, bool until_finished) {
  const auto start = std::chrono::steady_clock::now();
  const auto limit = timeout_s ? std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::duration<double>(std::max(0.0, *timeout_s)))
                               : std::chrono::nanoseconds::max();
  while (true) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    const auto left = limit - std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed);
    bool ready = false;
    {
      py::gil_scoped_release release;
      ready = call.WaitFor(std::min<std::chrono::nanoseconds>(kWaitSlice, std::max(left, 0ns)),
                           until_finished);
    }
    if (ready) return true;
    if (PyErr_CheckSignals() != 0) {
      call.Cancel();
      {
        py::gil_scoped_release release;
        call.WaitFor(kCancelBound, /*until_finished=*/true);
      }
      throw py::error_already_set();
    }
    if (left <= kWaitSlice) return false;
  }
}

std::string Quote(const std::string& s) { return py::repr(py::str(s)).cast<std::string>(); }

// What an operator needs to tell handoffs apart; never any request content.
std::string Repr(const Handoff& h) {
  const json& d = h.result.descriptor();
  std::string engine = "?";
  if (auto it = d.find("remote_engine_id"); it != d.end() && it->is_string()) {
    engine = it->get<std::string>();
  }
  char age[32];
  std::snprintf(age, sizeof(age), "%.3f",
                engines::Seconds(Runtime::Get().clock().Now() - h.started));
  std::string out = "<PrefillResult producer_url=" + Quote(h.result.producer_url()) +
                    " endpoint=" + std::string(engines::ApiPath(h.result.endpoint())) +
                    " backend_request_id=" + Quote(h.result.backend_request_id()) +
                    " connector=" + Quote(h.result.connector()) +
                    " remote_engine_id=" + Quote(engine);
  if (auto it = d.find("remote_block_ids"); it != d.end() && it->is_array()) {
    out += " blocks=" + std::to_string(it->size());
  }
  out += " age=" + std::string(age) + "s>";
  return out;
}

}  // namespace
}  // namespace narwhal::python

PYBIND11_MODULE(_core, m) {
  using namespace narwhal::python;  // NOLINT(build/namespaces)
  namespace engines = narwhal::engines;
  m.doc() = "The C++ engine adapter behind narwhal.engines (private; use narwhal.engines.client).";

  py::class_<Handoff, std::shared_ptr<Handoff>> handoff(m, "PrefillResult", R"doc(
The KV handoff of one prefill leg (B2): the backend-owned descriptor bound to
the producer that issued it. Returned by EngineClient.prefill(); pass it
unchanged to EngineClient.decode(). Immutable.
)doc");
  handoff.attr("__module__") = "narwhal.engines.connector";
  handoff
      .def_property_readonly(
          "producer_url", [](const Handoff& h) { return h.result.producer_url(); },
          "URL of the producer engine that ran the prefill leg.")
      .def_property_readonly(
          "endpoint", [](const Handoff& h) { return std::string(engines::ApiPath(h.result.endpoint())); },
          "The OpenAI endpoint of the prefill leg: \"/v1/completions\" or \"/v1/chat/completions\".")
      .def_property_readonly(
          "backend_request_id", [](const Handoff& h) { return h.result.backend_request_id(); },
          "The X-Request-Id the prefill leg carried (fresh per leg).")
      .def_property_readonly(
          "connector", [](const Handoff& h) { return h.result.connector(); },
          "The KV connector the descriptor is for (e.g. \"NixlConnector\").")
      .def_property_readonly(
          "age",
          [](const Handoff& h) { return engines::Seconds(Runtime::Get().clock().Now() - h.started); },
          "Seconds since the producer leg started (the handoff's age, B7).")
      .def(
          "parameters",
          [](const Handoff& h) { return LoadJson(h.result.parameters().dump()); },
          "A new dict holding the descriptor (kv_transfer_params) on every call; changing it\n"
          "changes nothing the decode sends (B6).")
      .def("__repr__", &Repr);

  py::class_<Waker, std::shared_ptr<Waker>>(
      m, "Waker", "Wakes one asyncio loop: notify() runs (with the GIL) when legs become ready.")
      .def(py::init<py::object>(), py::arg("notify"))
      .def("take", &Waker::Take);

  py::class_<Call, std::shared_ptr<Call>>(
      m, "Call", "One running leg: wait() (GIL released, signals checked), cancel(), arm().")
      .def(
          "wait",
          [](Call& c, std::optional<double> timeout_s) { return WaitInterruptibly(c, timeout_s, false); },
          py::arg("timeout_s") = py::none())
      .def("cancel", &Call::Cancel)
      .def("arm",
           [](Call& c, const std::shared_ptr<Waker>& waker, uint64_t token) {
             return c.Arm(std::weak_ptr<ReadyListener>(waker), token);
           })
      .def_property_readonly("finished", &Call::finished);

  py::class_<PrefillCall, Call, std::shared_ptr<PrefillCall>>(m, "PrefillCall")
      .def("outcome", [](const PrefillCall& c) -> py::tuple {
        if (std::shared_ptr<const Handoff> r = c.result()) {
          return py::make_tuple(std::const_pointer_cast<Handoff>(r), py::none());
        }
        std::optional<engines::EngineFailure> f = c.failure();
        if (!f) return py::make_tuple(py::none(), py::none());
        return py::make_tuple(py::none(), FailureDict(*f));
      });

  py::class_<DecodeCall, Call, std::shared_ptr<DecodeCall>>(m, "DecodeCall")
      .def("rejection",
           [](const DecodeCall& c) -> py::object {
             if (!c.rejection()) return py::none();
             return FailureDict(*c.rejection());
           })
      .def("take", [](DecodeCall& c) -> py::tuple {
        DecodeCall::Taken t = c.Take();
        py::list items;
        for (const std::string& item : t.items) items.append(py::bytes(item));
        py::object failure = t.failure ? py::object(FailureDict(*t.failure)) : py::object(py::none());
        return py::make_tuple(items, t.finished, failure);
      });

  py::class_<ClientCore, std::shared_ptr<ClientCore>>(
      m, "Client", "The adapter configured for one engine URL; starts prefill and decode legs.")
      .def(py::init([](std::string url, std::string connector, double first_token_timeout_s,
                       double decode_read_timeout_s, double connect_timeout_s,
                       std::optional<double> prefill_timeout_s, std::string api_key) {
             if (!url.empty() && url.back() == '/') url.pop_back();
             std::string host;
             int port = 0;
             // The Python client has no engine.tls options: https:// engines
             // are for the router (engines/http/tls_client.h).
             if (engines::IsTlsEngineUrl(url)) {
               throw py::value_error(
                   "url must be http://host:port: https:// engines are not supported by the "
                   "Python client (got \"" + url + "\")");
             }
             if (!engines::ParseEngineUrl(url, &host, &port)) {
               throw py::value_error("url must be http://host:port (got \"" + url + "\")");
             }
             if (connector.empty()) throw py::value_error("connector must not be empty");
             ClientConfig config;
             config.url = url;
             config.http.connector = std::move(connector);
             config.http.first_token_timeout_s =
                 CheckSeconds("first_token_timeout_s", first_token_timeout_s, false);
             config.http.decode_read_timeout_s =
                 CheckSeconds("decode_read_timeout_s", decode_read_timeout_s, true);
             config.http.connect_timeout_s =
                 CheckSeconds("connect_timeout_s", connect_timeout_s, false);
             if (prefill_timeout_s) {
               config.prefill_timeout_s =
                   CheckSeconds("prefill_timeout_s", *prefill_timeout_s, false);
             }
             config.http.api_key = std::move(api_key);
             return std::make_shared<ClientCore>(std::move(config));
           }),
           py::arg("url"), py::arg("connector"), py::arg("first_token_timeout_s"),
           py::arg("decode_read_timeout_s"), py::arg("connect_timeout_s"),
           py::arg("prefill_timeout_s"), py::arg("api_key"))
      .def_property_readonly("url", [](const ClientCore& c) { return c.config().url; })
      .def_property_readonly("connector",
                             [](const ClientCore& c) { return c.config().http.connector; })
      .def("start_prefill",
           [](ClientCore& c, const std::string& body, const std::string& endpoint) {
             return c.StartPrefill(ParseBody(body), ParseEndpoint(endpoint));
           })
      .def("start_decode", [](ClientCore& c, const std::shared_ptr<Handoff>& handoff,
                              const std::string& body, std::optional<std::string> endpoint,
                              bool stream) {
        if (!handoff) throw py::type_error("result must be a PrefillResult");
        const engines::Api api =
            endpoint ? ParseEndpoint(*endpoint) : handoff->result.endpoint();
        return c.StartDecode(handoff, ParseBody(body), api, stream);
      });

  m.def(
      "shutdown",
      [] {
        py::gil_scoped_release release;
        Runtime::ShutdownIfStarted();
      },
      "Stops the adapter's event loop (run at interpreter exit).");
  m.def("new_backend_request_id", &NewBackendRequestId);
}
