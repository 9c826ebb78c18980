// narwhal-bench: load generator and measurement tool (SPEC §2).
//
// Drives N concurrent streaming generations for a fixed duration through one
// of three paths and reports throughput, client-observed time to the first
// generated token (p50/p90/p99) and, given the router's pid, router CPU time
// and relayed frames per router CPU-second:
//   --mode http    the router's OpenAI HTTP shim (SSE)
//   --mode grpc    the router's narwhal.v1.Inference/Generate
//   --mode direct  no router: the client itself runs the prefill leg on
//                  --prefill and the decode leg on --decode (the same engine
//                  adapter the router uses), as the baseline for the router's
//                  added latency.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engines/http_engine_client.h"
#include "engines/sse_reader.h"
#include "engines/stream_event.h"
#include "narwhal/v1/inference.grpc.pb.h"

namespace narwhal::bench {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr char kUsage[] =
    "usage: narwhal-bench --mode http|grpc|direct [--target HOST:PORT]\n"
    "                     [--prefill http://H:P --decode http://H:P] [--concurrency N]\n"
    "                     [--duration-s S] [--max-tokens K] [--prompt-words W]\n"
    "                     [--model NAME] [--pid ROUTER_PID] [--json]\n";

struct Options {
  std::string mode;
  std::string target;
  std::string prefill, decode;
  int concurrency = 64;
  double duration_s = 10;
  int max_tokens = 64;
  int prompt_words = 64;
  std::string model = "Qwen/Qwen3-0.6B";
  int pid = 0;
  bool json_out = false;
};

struct Stats {
  std::mutex mu;
  std::vector<double> ttfb_s;
  long long ok = 0;
  long long failed = 0;
  long long frames = 0;
  std::string first_error;

  void Record(bool success, double ttfb, long long frame_count, const std::string& error) {
    std::lock_guard<std::mutex> lock(mu);
    frames += frame_count;
    if (success) {
      ++ok;
      ttfb_s.push_back(ttfb);
    } else {
      ++failed;
      if (first_error.empty()) first_error = error;
    }
  }
};

// utime + stime of a process, in seconds.
double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return -1;
  // Fields after the parenthesised command name; utime/stime are 14 and 15.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::string Prompt(int words, long long n) {
  std::string p = "request " + std::to_string(n) + ":";
  for (int i = 0; i < words; ++i) p += " narwhal";
  return p;
}

// One streaming request through the HTTP shim.
void HttpOnce(httplib::Client& client, const Options& o, long long n, Stats& stats) {
  const json body = {{"model", o.model},
                     {"prompt", Prompt(o.prompt_words, n)},
                     {"max_tokens", o.max_tokens},
                     {"stream", true}};
  const auto start = Clock::now();
  double ttfb = -1;
  long long frames = 0;
  bool done = false;
  int status = 0;
  engines::SseReader sse;
  engines::StreamEvent event;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    return sse.Feed(std::string_view(data, len), [&](std::string_view payload) {
      engines::ClassifyEvent(payload, &event);
      if (event.kind == engines::EventKind::kDone) {
        done = true;
        return false;
      }
      ++frames;
      if (ttfb < 0 && event.kind == engines::EventKind::kToken) {
        ttfb = std::chrono::duration<double>(Clock::now() - start).count();
      }
      return true;
    });
  };
  auto res = client.send(req);
  const bool ok = status == 200 && done && ttfb >= 0;
  stats.Record(ok, ttfb, frames,
               ok ? "" : "HTTP " + std::to_string(status) + " " + httplib::to_string(res.error()));
}

void GrpcOnce(narwhal::v1::Inference::Stub& stub, const Options& o, long long n, Stats& stats) {
  narwhal::v1::GenerateRequest req;
  req.set_model(o.model);
  req.set_prompt(Prompt(o.prompt_words, n));
  req.set_max_tokens(o.max_tokens);
  grpc::ClientContext ctx;
  const auto start = Clock::now();
  auto reader = stub.Generate(&ctx, req);
  narwhal::v1::GenerateResponse resp;
  double ttfb = -1;
  long long frames = 0;
  bool final_seen = false;
  while (reader->Read(&resp)) {
    if (resp.has_delta()) {
      ++frames;
      if (ttfb < 0) ttfb = std::chrono::duration<double>(Clock::now() - start).count();
    } else {
      final_seen = true;
    }
  }
  const grpc::Status status = reader->Finish();
  const bool ok = status.ok() && final_seen && ttfb >= 0;
  stats.Record(ok, ttfb, frames, ok ? "" : "gRPC " + status.error_message());
}

// Counts frames and stamps the first token of a direct decode leg.
class DirectObserver : public engines::DecodeObserver {
 public:
  explicit DirectObserver(Clock::time_point start) : start_(start) {}
  bool OnEvent(std::string_view, const engines::StreamEvent& ev) override {
    ++frames;
    if (ttfb < 0 && ev.kind == engines::EventKind::kToken) {
      ttfb = std::chrono::duration<double>(Clock::now() - start_).count();
    }
    return true;
  }
  double ttfb = -1;
  long long frames = 0;

 private:
  Clock::time_point start_;
};

void DirectOnce(engines::HttpEngineClient& client, const Options& o, long long n, Stats& stats) {
  const json body = {{"model", o.model},
                     {"prompt", Prompt(o.prompt_words, n)},
                     {"max_tokens", o.max_tokens},
                     {"stream", true}};
  const auto start = Clock::now();
  engines::LegOptions legs;
  legs.request_deadline = start + std::chrono::seconds(600);
  legs.backend_request_id = "bench-" + std::to_string(n) + "p";
  engines::PrefillOutcome pre =
      client.Prefill({"p", o.prefill}, engines::Api::kCompletions, body, legs);
  if (!pre.ok()) return stats.Record(false, 0, 0, pre.failure->detail);
  legs.backend_request_id = "bench-" + std::to_string(n) + "d";
  DirectObserver observer(start);
  engines::DecodeOutcome dec =
      client.Decode({"d", o.decode}, *pre.result, body, true, legs, observer);
  stats.Record(dec.ok(), observer.ttfb, observer.frames, dec.ok() ? "" : dec.failure->detail);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t idx = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[idx];
}

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--json") {
      o->json_out = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::cerr << "narwhal-bench: " << flag << " needs a value\n" << kUsage;
      return false;
    }
    const std::string v = argv[++i];
    try {
      if (flag == "--mode") o->mode = v;
      else if (flag == "--target") o->target = v;
      else if (flag == "--prefill") o->prefill = v;
      else if (flag == "--decode") o->decode = v;
      else if (flag == "--concurrency") o->concurrency = std::stoi(v);
      else if (flag == "--duration-s") o->duration_s = std::stod(v);
      else if (flag == "--max-tokens") o->max_tokens = std::stoi(v);
      else if (flag == "--prompt-words") o->prompt_words = std::stoi(v);
      else if (flag == "--model") o->model = v;
      else if (flag == "--pid") o->pid = std::stoi(v);
      else {
        std::cerr << "narwhal-bench: unknown argument " << flag << "\n" << kUsage;
        return false;
      }
    } catch (const std::exception&) {
      std::cerr << "narwhal-bench: bad value for " << flag << ": " << v << "\n";
      return false;
    }
  }
  const bool direct = o->mode == "direct";
  if ((o->mode != "http" && o->mode != "grpc" && !direct) || (!direct && o->target.empty()) ||
      (direct && (o->prefill.empty() || o->decode.empty())) || o->concurrency < 1 ||
      o->duration_s <= 0) {
    std::cerr << kUsage;
    return false;
  }
  return true;
}

int Run(const Options& o) {
  Stats stats;
  std::atomic<long long> counter{0};
  std::atomic<bool> stop{false};
  engines::HttpEngineClientOptions engine_options;
  engine_options.first_token_timeout_s = 60;
  engine_options.decode_read_timeout_s = 60;
  engines::HttpEngineClient direct(engine_options);
  std::shared_ptr<grpc::Channel> channel;
  if (o.mode == "grpc") channel = grpc::CreateChannel(o.target, grpc::InsecureChannelCredentials());

  const double cpu_before = o.pid > 0 ? ProcessCpuSeconds(o.pid) : -1;
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < o.concurrency; ++w) {
    workers.emplace_back([&] {
      std::string host = o.target.substr(0, o.target.rfind(':'));
      int port = o.mode == "http" ? std::stoi(o.target.substr(o.target.rfind(':') + 1)) : 0;
      std::unique_ptr<httplib::Client> http;
      if (o.mode == "http") {
        http = std::make_unique<httplib::Client>(host, port);
        http->set_keep_alive(true);
        http->set_read_timeout(600, 0);
      }
      std::unique_ptr<narwhal::v1::Inference::Stub> stub;
      if (channel) stub = narwhal::v1::Inference::NewStub(channel);
      while (!stop.load()) {
        const long long n = counter++;
        if (o.mode == "http") HttpOnce(*http, o, n, stats);
        else if (o.mode == "grpc") GrpcOnce(*stub, o, n, stats);
        else DirectOnce(direct, o, n, stats);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(o.duration_s));
  stop.store(true);
  for (std::thread& t : workers) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = o.pid > 0 ? ProcessCpuSeconds(o.pid) - cpu_before : -1;

  json report = {{"mode", o.mode},
                 {"concurrency", o.concurrency},
                 {"max_tokens", o.max_tokens},
                 {"elapsed_s", elapsed},
                 {"requests_ok", stats.ok},
                 {"requests_failed", stats.failed},
                 {"frames", stats.frames},
                 {"frames_per_s", stats.frames / elapsed},
                 {"ttfb_p50_ms", Percentile(stats.ttfb_s, 0.50) * 1000},
                 {"ttfb_p90_ms", Percentile(stats.ttfb_s, 0.90) * 1000},
                 {"ttfb_p99_ms", Percentile(stats.ttfb_s, 0.99) * 1000}};
  if (cpu >= 0) {
    report["router_cpu_s"] = cpu;
    report["frames_per_router_cpu_s"] = cpu > 0 ? stats.frames / cpu : 0;
  }
  if (!stats.first_error.empty()) report["first_error"] = stats.first_error;
  if (o.json_out) {
    std::cout << report.dump() << "\n";
  } else {
    std::printf("%-6s c=%-4d ok=%lld failed=%lld frames/s=%.0f ttfb p50=%.2fms p90=%.2fms "
                "p99=%.2fms",
                o.mode.c_str(), o.concurrency, stats.ok, stats.failed, stats.frames / elapsed,
                report["ttfb_p50_ms"].get<double>(), report["ttfb_p90_ms"].get<double>(),
                report["ttfb_p99_ms"].get<double>());
    if (cpu >= 0) {
      std::printf(" router_cpu=%.2fs frames/cpu_s=%.0f", cpu,
                  report["frames_per_router_cpu_s"].get<double>());
    }
    std::printf("\n");
    if (!stats.first_error.empty()) std::printf("first error: %s\n", stats.first_error.c_str());
  }
  return stats.ok > 0 ? 0 : 1;
}

}  // namespace
}  // namespace narwhal::bench

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  narwhal::bench::Options options;
  if (!narwhal::bench::ParseArgs(argc, argv, &options)) return 2;
  return narwhal::bench::Run(options);
}
