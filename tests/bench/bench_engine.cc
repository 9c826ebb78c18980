// bench_engine: a minimal, cheap vLLM-shaped engine for relay benchmarks.
//
// It speaks just enough of the vLLM OpenAI server (wire contract §3, §8, §10,
// §11) for a router, nginx or narwhal-bench to run disaggregated requests
// through it, and as little else as possible so that the relay in front of
// it dominates the CPU bill:
//   GET  /health, /v1/models, /version, /metrics
//   POST /v1/completions, /v1/chat/completions
//     stream:false  one JSON completion (the router's prefill leg); with
//                   kv_transfer_params.do_remote_decode it carries a
//                   top-level NIXL-shaped descriptor, else null. It answers
//                   after --prefill-ms plus (max_tokens - 1) token intervals.
//     stream:true   text/event-stream, chunked: chat streams send the role
//                   chunk at once; then max_tokens compact chunks, the first
//                   one token interval after the request and one per
//                   interval after that (the last has finish_reason
//                   "length"); a usage chunk when stream_options asks for it
//                   (include_usage, which defaults to true once a
//                   stream_options object is present, as in vLLM); then
//                   data: [DONE]. With return_token_ids true each token
//                   chunk carries its id in `token_ids`, as vLLM's do.
// It never checks a descriptor it receives: this is a relay benchmark, not a
// KV simulator (narwhal-sim is the faithful one).
//
// One io_context run by --threads threads; one coroutine and one timer per
// connection (no thread per stream); HTTP/1.1 keep-alive; Beast does all the
// HTTP parsing and chunked framing. Request bodies are bounded (8 MiB).
// --listeners N serves N engines from the one process: N listeners, on
// --port and the N-1 ports after it (or N free ports when --port is 0), all
// answering alike (a fleet of many engines on one host, for benchmarks of
// the router's per-engine cost).
//
//   bench_engine [--host H] [--port N] [--engine-id ID] [--model NAME]
//                [--token-interval-ms X] [--prefill-ms X] [--threads N]
//                [--listeners N]
//
// Prints "bench_engine ready port=N" on stdout once listening (the first
// listener's port), followed by " ports=A,B,..." (every listener's, in
// order) when N > 1. Exit status 0 after SIGTERM/SIGINT, 1 when it cannot
// listen, 2 on bad arguments.
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace bench_engine {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;  // keeps vLLM's field order
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxBodyBytes = 8 << 20;
constexpr int kMaxTokens = 1 << 20;

constexpr char kUsage[] =
    "usage: bench_engine [--host H] [--port N] [--engine-id ID] [--model NAME]\n"
    "                    [--token-interval-ms X] [--prefill-ms X] [--threads N]\n"
    "                    [--listeners N]\n";

struct Config {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string engine_id = "bench-engine";
  std::string model = "Qwen/Qwen3-0.6B";
  double token_interval_ms = 20;
  double prefill_ms = 0;
  int threads = 1;
  int listeners = 1;
  std::string model_json;  // the model name as a JSON string literal
};

std::atomic<long long> g_running{0};
std::atomic<long long> g_served{0};
std::atomic<long long> g_next_id{0};

// Output text: token i is kWords[i % size], so frames have a stable size.
constexpr std::string_view kWords[] = {" w",    " the", " quick", " brown", " fox", " jumps",
                                       " over", " a",   " lazy",  " dog",   " and", " runs",
                                       " far",  " to",  " the",   " sea"};

std::chrono::nanoseconds Ms(double ms) {
  return std::chrono::nanoseconds(static_cast<long long>(ms * 1e6));
}

// A request id safe to embed in JSON and ids unescaped.
std::string SafeId(std::string_view in) {
  std::string out;
  for (char c : in.substr(0, 128)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == ':';
    out.push_back(ok ? c : '_');
  }
  return out;
}

int CountWords(std::string_view text) {
  int words = 0;
  bool in_word = false;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  return words;
}

// What a generation request asks for; `error` is set when it is refused.
struct Generation {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool remote_decode = false;
  bool token_ids = false;  // return_token_ids
  int max_tokens = 16;
  int prompt_tokens = 0;
  int error_status = 0;
  std::string error, error_param;
};

Generation ParseGeneration(const std::string& body, bool chat, const Config& cfg) {
  Generation g;
  g.chat = chat;
  auto fail = [&g](int status, std::string message, std::string param = "") {
    g.error_status = status;
    g.error = std::move(message);
    g.error_param = std::move(param);
    return g;
  };
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return fail(400, "request body is not a JSON object");
  const auto model = doc.find("model");
  if (model == doc.end() || !model->is_string()) return fail(400, "model is required", "model");
  if (model->get_ref<const std::string&>() != cfg.model) {
    return fail(404, "The model `" + model->get<std::string>() + "` does not exist.", "model");
  }
  if (const auto s = doc.find("stream"); s != doc.end() && !s->is_null()) {
    if (!s->is_boolean()) return fail(400, "stream must be a boolean", "stream");
    g.stream = s->get<bool>();
  }
  if (const auto so = doc.find("stream_options"); so != doc.end() && !so->is_null()) {
    if (!g.stream) return fail(400, "Stream options can only be defined when `stream=True`.");
    if (!so->is_object()) return fail(400, "stream_options must be an object", "stream_options");
    const auto iu = so->find("include_usage");
    g.include_usage = iu == so->end() || iu->is_null() || (iu->is_boolean() && iu->get<bool>());
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    const auto mt = doc.find(key);
    if (mt == doc.end() || mt->is_null()) continue;
    if (!mt->is_number_integer() || mt->get<long long>() < 1 || mt->get<long long>() > kMaxTokens) {
      return fail(400, std::string(key) + " must be an integer in [1, 1048576]", key);
    }
    g.max_tokens = mt->get<int>();
  }
  if (const auto ids = doc.find("return_token_ids"); ids != doc.end() && ids->is_boolean()) {
    g.token_ids = ids->get<bool>();
  }
  if (const auto kv = doc.find("kv_transfer_params"); kv != doc.end() && kv->is_object()) {
    const auto rd = kv->find("do_remote_decode");
    g.remote_decode = rd != kv->end() && rd->is_boolean() && rd->get<bool>();
  }
  if (chat) {
    const auto messages = doc.find("messages");
    if (messages == doc.end() || !messages->is_array()) {
      return fail(400, "messages is required", "messages");
    }
    for (const json& m : *messages) {
      if (!m.is_object()) continue;
      const auto content = m.find("content");
      if (content != m.end() && content->is_string()) {
        g.prompt_tokens += CountWords(content->get_ref<const std::string&>());
      }
    }
  } else {
    const auto prompt = doc.find("prompt");
    if (prompt == doc.end() || !(prompt->is_string() || prompt->is_array())) {
      return fail(400, "prompt is required", "prompt");
    }
    g.prompt_tokens = prompt->is_string() ? CountWords(prompt->get_ref<const std::string&>())
                                          : static_cast<int>(prompt->size());
  }
  g.prompt_tokens = std::max(g.prompt_tokens, 1);
  return g;
}

std::string ErrorBody(int status, const std::string& message, const std::string& param) {
  const char* type = status == 404   ? "NotFoundError"
                     : status == 413 ? "Bad Request"
                                     : "BadRequestError";
  return json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", status}}}}
      .dump();
}

// The compact per-stream pieces of vLLM's chunk JSON.
class Chunks {
 public:
  Chunks(const Generation& g, const std::string& id, long long created, const Config& cfg)
      : chat_(g.chat), token_ids_(g.token_ids) {
    head_ = std::string(R"(data: {"id":")") + (g.chat ? "chatcmpl-" : "cmpl-") + id +
            R"(","object":")" + (g.chat ? "chat.completion.chunk" : "text_completion") +
            R"(","created":)" + std::to_string(created) + R"(,"model":)" + cfg.model_json +
            R"(,"choices":)";
  }
  std::string Role() const {
    return head_ + R"([{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,)"
                   R"("finish_reason":null}]})"
                   "\n\n";
  }
  void Token(int i, bool last, std::string* out) const {
    out->assign(head_);
    out->append(chat_ ? R"([{"index":0,"delta":{"content":")" : R"([{"index":0,"text":")");
    out->append(kWords[i % std::size(kWords)]);
    if (chat_) {
      out->append(last ? R"("},"logprobs":null,"finish_reason":"length","stop_reason":null)"
                       : R"("},"logprobs":null,"finish_reason":null)");
    } else {
      out->append(last ? R"(","logprobs":null,"finish_reason":"length","stop_reason":null)"
                       : R"(","logprobs":null,"finish_reason":null,"stop_reason":null)");
    }
    if (token_ids_) {
      out->append(R"(,"token_ids":[)");
      out->append(std::to_string(1000 + i % std::size(kWords)));
      out->append("]");
    }
    out->append("}]}\n\n");
  }
  std::string Usage(int prompt_tokens, int completion_tokens) const {
    return head_ + R"([],"usage":{"prompt_tokens":)" + std::to_string(prompt_tokens) +
           R"(,"total_tokens":)" + std::to_string(prompt_tokens + completion_tokens) +
           R"(,"completion_tokens":)" + std::to_string(completion_tokens) + "}}\n\n";
  }

 private:
  bool chat_;
  bool token_ids_;
  std::string head_;
};

std::string CompletionBody(const Generation& g, const std::string& id, long long created,
                           const Config& cfg) {
  std::string text;
  for (int i = 0; i < g.max_tokens; ++i) text += kWords[i % std::size(kWords)];
  ojson choice = {
      {"index", 0}, {"logprobs", nullptr}, {"finish_reason", "length"}, {"stop_reason", nullptr}};
  if (g.chat) {
    choice["message"] = {
        {"role", "assistant"}, {"content", text}, {"refusal", nullptr}, {"reasoning", nullptr}};
  } else {
    choice["text"] = text;
    choice["prompt_logprobs"] = nullptr;
  }
  ojson kv = nullptr;
  if (g.remote_decode) {
    kv = {{"do_remote_prefill", true},
          {"do_remote_decode", false},
          {"remote_engine_id", cfg.engine_id},
          {"remote_block_ids", ojson::array({ojson::array({1, 2, 3})})},
          {"remote_request_id", id + "-abcd1234"},
          {"remote_host", "127.0.0.1"},
          {"remote_port", 5600},
          {"tp_size", 1}};
  }
  return ojson{{"id", (g.chat ? "chatcmpl-" : "cmpl-") + id},
               {"object", g.chat ? "chat.completion" : "text_completion"},
               {"created", created},
               {"model", cfg.model},
               {"choices", ojson::array({choice})},
               {"usage",
                {{"prompt_tokens", g.prompt_tokens},
                 {"total_tokens", g.prompt_tokens + g.max_tokens},
                 {"completion_tokens", g.max_tokens}}},
               {"kv_transfer_params", kv}}
      .dump();
}

// Response bodies are built in plain functions, outside co_await
// expressions: gcc 12 rejects initializer lists inside those.
std::string ModelsBody(const Config& cfg) {
  const ojson card = {{"id", cfg.model},        {"object", "model"},           {"created", 0},
                      {"owned_by", "vllm"},     {"root", cfg.model},           {"parent", nullptr},
                      {"max_model_len", 32768}, {"permission", ojson::array()}};
  return ojson{{"object", "list"}, {"data", ojson::array({card})}}.dump();
}

std::string MetricsBody(const Config& cfg) {
  const std::string label = "{model_name=" + cfg.model_json + "}";
  return "vllm:num_requests_running" + label + " " + std::to_string(g_running.load()) +
         "\nvllm:num_requests_waiting" + label + " 0\nbench_engine_requests_total " +
         std::to_string(g_served.load()) + "\n";
}

// One connection: requests in order, keep-alive, one stream at a time.
class Session {
 public:
  Session(tcp::socket socket, const Config& cfg) : socket_(std::move(socket)), cfg_(cfg) {}

  net::awaitable<void> Run() {
    beast::error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(kMaxBodyBytes);
      co_await http::async_read(socket_, buffer, parser,
                                net::redirect_error(net::use_awaitable, ec));
      if (ec == http::error::body_limit) {
        co_await Reply(http::status::payload_too_large, 11, false,
                       ErrorBody(413, "request body too large", ""), "application/json");
        break;
      }
      if (ec) break;  // closed, reset or malformed
      const http::request<http::string_body>& req = parser.get();
      const bool keep = co_await Handle(req);
      if (!keep || !req.keep_alive()) break;
    }
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    socket_.close(ec);
  }

 private:
  // Returns whether the connection can carry another request.
  net::awaitable<bool> Handle(const http::request<http::string_body>& req) {
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    const unsigned version = req.version();
    const bool keep = req.keep_alive();
    if (req.method() == http::verb::get) {
      if (path == "/health" || path == "/ping") {
        co_return co_await Reply(http::status::ok, version, keep, "", "application/json");
      }
      if (path == "/version") {
        co_return co_await Reply(http::status::ok, version, keep, R"({"version":"0.29.1"})",
                                 "application/json");
      }
      if (path == "/v1/models") {
        co_return co_await Reply(http::status::ok, version, keep, ModelsBody(cfg_),
                                 "application/json");
      }
      if (path == "/metrics") {
        co_return co_await Reply(http::status::ok, version, keep, MetricsBody(cfg_),
                                 "text/plain; version=0.0.4");
      }
    }
    const bool chat = path == "/v1/chat/completions";
    if (!chat && path != "/v1/completions") {
      co_return co_await Reply(http::status::not_found, version, keep,
                               ErrorBody(404, "Not Found", ""), "application/json");
    }
    if (req.method() != http::verb::post) {
      co_return co_await Reply(http::status::method_not_allowed, version, keep,
                               ErrorBody(405, "Method Not Allowed", ""), "application/json");
    }
    const Generation g = ParseGeneration(req.body(), chat, cfg_);
    if (g.error_status != 0) {
      co_return co_await Reply(static_cast<http::status>(g.error_status), version, keep,
                               ErrorBody(g.error_status, g.error, g.error_param),
                               "application/json");
    }
    ++g_served;
    const auto rid_header = req.find("X-Request-Id");
    const std::string id =
        rid_header != req.end()
            ? SafeId(std::string_view(rid_header->value().data(), rid_header->value().size()))
            : "bench-" + std::to_string(g_next_id++);
    const long long created = static_cast<long long>(std::time(nullptr));
    if (!g.stream) {
      net::steady_timer timer(socket_.get_executor());
      timer.expires_after(Ms(cfg_.prefill_ms + (g.max_tokens - 1) * cfg_.token_interval_ms));
      beast::error_code ec;
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
      co_return co_await Reply(http::status::ok, version, keep,
                               CompletionBody(g, id, created, cfg_), "application/json");
    }
    ++g_running;
    const bool reusable = co_await Stream(g, Chunks(g, id, created, cfg_), version, keep);
    --g_running;
    co_return reusable;
  }

  // Streams the SSE events; HTTP/1.0 peers get a close-delimited body.
  net::awaitable<bool> Stream(const Generation& g, const Chunks& chunks, unsigned version,
                              bool keep) {
    const bool chunked = version >= 11;
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::content_type, "text/event-stream; charset=utf-8");
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(keep && chunked);
    res.chunked(chunked);
    http::response_serializer<http::empty_body> serializer{res};
    beast::error_code ec;
    co_await http::async_write_header(socket_, serializer,
                                      net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return false;
    auto send = [&](std::string_view frame) -> net::awaitable<bool> {
      if (chunked) {
        co_await net::async_write(socket_, http::make_chunk(net::buffer(frame)),
                                  net::redirect_error(net::use_awaitable, ec));
      } else {
        co_await net::async_write(socket_, net::buffer(frame),
                                  net::redirect_error(net::use_awaitable, ec));
      }
      co_return !ec;
    };
    if (g.chat && !co_await send(chunks.Role())) co_return false;
    net::steady_timer timer(socket_.get_executor());
    auto next = Clock::now();
    std::string frame;
    for (int i = 0; i < g.max_tokens; ++i) {
      // Absolute deadlines, so the stream keeps its rate under load.
      next += Ms(cfg_.token_interval_ms);
      timer.expires_at(next);
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
      chunks.Token(i, i + 1 == g.max_tokens, &frame);
      if (!co_await send(frame)) co_return false;
    }
    if (g.include_usage && !co_await send(chunks.Usage(g.prompt_tokens, g.max_tokens))) {
      co_return false;
    }
    if (!co_await send("data: [DONE]\n\n")) co_return false;
    if (!chunked) co_return false;
    co_await net::async_write(socket_, http::make_chunk_last(),
                              net::redirect_error(net::use_awaitable, ec));
    co_return !ec && res.keep_alive();
  }

  net::awaitable<bool> Reply(http::status status, unsigned version, bool keep, std::string body,
                             const char* content_type) {
    http::response<http::string_body> res{status, version};
    res.set(http::field::content_type, content_type);
    res.keep_alive(keep);
    res.body() = std::move(body);
    res.prepare_payload();
    beast::error_code ec;
    co_await http::async_write(socket_, res, net::redirect_error(net::use_awaitable, ec));
    co_return !ec && keep;
  }

  tcp::socket socket_;
  const Config& cfg_;
};

net::awaitable<void> Accept(tcp::acceptor& acceptor, const Config& cfg) {
  for (;;) {
    beast::error_code ec;
    // One strand per connection: with --threads > 1 a session's handlers
    // never run concurrently.
    tcp::socket socket = co_await acceptor.async_accept(
        net::make_strand(acceptor.get_executor()), net::redirect_error(net::use_awaitable, ec));
    if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // EMFILE and friends: back off instead of spinning.
      net::steady_timer pause(acceptor.get_executor(), std::chrono::milliseconds(50));
      co_await pause.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    const auto executor = socket.get_executor();
    auto session = std::make_shared<Session>(std::move(socket), cfg);
    net::co_spawn(
        executor, [session]() -> net::awaitable<void> { co_await session->Run(); },
        [](std::exception_ptr e) {
          if (e) {
            try {
              std::rethrow_exception(e);
            } catch (const std::exception& ex) {
              std::cerr << "bench_engine: session error: " << ex.what() << "\n";
            }
          }
        });
  }
}

bool ParseArgs(int argc, char** argv, Config* c) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::cerr << "bench_engine: " << flag << " needs a value\n" << kUsage;
      return false;
    }
    const std::string v = argv[++i];
    try {
      size_t used = 0;
      if (flag == "--host") {
        c->host = v;
      } else if (flag == "--port") {
        c->port = std::stoi(v, &used);
      } else if (flag == "--engine-id") {
        c->engine_id = v;
      } else if (flag == "--model") {
        c->model = v;
      } else if (flag == "--token-interval-ms") {
        c->token_interval_ms = std::stod(v, &used);
      } else if (flag == "--prefill-ms") {
        c->prefill_ms = std::stod(v, &used);
      } else if (flag == "--threads") {
        c->threads = std::stoi(v, &used);
      } else if (flag == "--listeners") {
        c->listeners = std::stoi(v, &used);
      } else {
        std::cerr << "bench_engine: unknown argument " << flag << "\n" << kUsage;
        return false;
      }
      if (used != 0 && used != v.size()) throw std::invalid_argument(v);
    } catch (const std::exception&) {
      std::cerr << "bench_engine: bad value for " << flag << ": " << v << "\n";
      return false;
    }
  }
  if (c->port < 0 || c->port > 65535 || c->threads < 1 || c->threads > 256 || c->listeners < 1 ||
      c->listeners > 4096 || (c->port != 0 && c->port + c->listeners - 1 > 65535) ||
      c->token_interval_ms < 0 || c->prefill_ms < 0 || c->engine_id.empty() || c->model.empty()) {
    std::cerr << "bench_engine: out-of-range argument\n" << kUsage;
    return false;
  }
  c->model_json = json(c->model).dump();
  return true;
}

void RaiseFdLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

int Main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  Config cfg;
  if (!ParseArgs(argc, argv, &cfg)) return 2;
  RaiseFdLimit();
  net::io_context ioc(cfg.threads);
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::string ports;
  for (int i = 0; i < cfg.listeners; ++i) {
    const int port = cfg.port == 0 ? 0 : cfg.port + i;
    auto acceptor = std::make_unique<tcp::acceptor>(ioc);
    try {
      const tcp::endpoint endpoint(net::ip::make_address(cfg.host),
                                   static_cast<unsigned short>(port));
      acceptor->open(endpoint.protocol());
      acceptor->set_option(net::socket_base::reuse_address(true));
      acceptor->bind(endpoint);
      acceptor->listen(4096);
    } catch (const std::exception& e) {
      std::cerr << "bench_engine: cannot listen on " << cfg.host << ":" << port << ": " << e.what()
                << "\n";
      return 1;
    }
    ports += (i == 0 ? "" : ",") + std::to_string(acceptor->local_endpoint().port());
    acceptors.push_back(std::move(acceptor));
  }
  if (cfg.listeners == 1) {
    std::printf("bench_engine ready port=%s\n", ports.c_str());
  } else {
    std::printf("bench_engine ready port=%d ports=%s\n", acceptors.front()->local_endpoint().port(),
                ports.c_str());
  }
  std::fflush(stdout);
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](const beast::error_code&, int) { ioc.stop(); });
  for (auto& acceptor : acceptors) net::co_spawn(ioc, Accept(*acceptor, cfg), net::detached);
  std::vector<std::thread> threads;
  for (int i = 1; i < cfg.threads; ++i) threads.emplace_back([&ioc] { ioc.run(); });
  ioc.run();
  for (std::thread& t : threads) t.join();
  return 0;
}

}  // namespace
}  // namespace bench_engine

int main(int argc, char** argv) { return bench_engine::Main(argc, argv); }
