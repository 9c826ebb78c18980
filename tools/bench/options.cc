#include "tools/bench/options.h"

#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "version/build_info.h"

namespace narwhal::bench {

const char kUsage[] =
    "usage: narwhal-bench --mode http|grpc|direct|decode-only [flags]\n"
    "  --mode M             http, grpc, direct or decode-only (required)\n"
    "  --target HOST:PORT   the router (http, grpc) or engine (decode-only) (default none)\n"
    "  --prefill URL        direct: the producer, http://H:P (default none)\n"
    "  --decode URL         direct: the consumer, http://H:P (default none)\n"
    "  --api completions|chat  the API driven (default completions)\n"
    "  --concurrency N      workers (default 64)\n"
    "  --duration-s S       how long the workers loop (default 10)\n"
    "  --ramp-s S           workers start spread over S seconds (default 0)\n"
    "  --max-tokens K       max_tokens of each request (default 64)\n"
    "  --prompt-words W     prompt length in words (default 64)\n"
    "  --model NAME         model name sent (default Qwen/Qwen3-0.6B)\n"
    "  --pid PID[,PID...]   relay processes whose CPU time is measured (default none)\n"
    "  --threads N          event-loop threads, HTTP modes (default 1)\n"
    "  --grpc-channels N    HTTP/2 connections, grpc mode (default 4)\n"
    "  --json               print the report as JSON (default off: a table)\n"
    "  --version            print the version and exit\n"
    "  --help, -h           print this help and exit\n"
    "Modes:\n"
    "  http         streaming completions through the router's HTTP shim (--target)\n"
    "  grpc         narwhal.v1.Inference/Generate through the router (--target)\n"
    "  direct       no router: prefill on --prefill, then the streaming decode on\n"
    "               --decode with the producer's kv_transfer_params\n"
    "  decode-only  only the streaming decode request, sent to --target (an engine,\n"
    "               or a plain proxy such as nginx in front of one)\n"
    "N workers loop requests for S seconds; a request still in flight at the end\n"
    "is cut (its frames up to the end count, it counts as neither ok nor failed).\n"
    "--pid sums the CPU time of the listed relay processes over the same window.\n"
    "The report also gives this process's own CPU share and the p99 lateness of a\n"
    "10 ms timer on its event loop, to tell whether the load driver kept up.\n"
    "Exit 0 when no request failed and some output arrived, 1 otherwise, 2 on bad\n"
    "arguments.\n";

namespace {

bool ParseInt(const std::string& v, int lo, int hi, int* out) {
  size_t used = 0;
  const long long n = std::stoll(v, &used);
  if (used != v.size() || n < lo || n > hi) return false;
  *out = static_cast<int>(n);
  return true;
}

bool ParseDouble(const std::string& v, double lo, double hi, double* out) {
  size_t used = 0;
  const double d = std::stod(v, &used);
  if (used != v.size() || !(d >= lo && d <= hi)) return false;
  *out = d;
  return true;
}

bool ParsePids(const std::string& v, std::vector<int>* out) {
  size_t start = 0;
  while (start <= v.size()) {
    const size_t comma = v.find(',', start);
    const std::string item = v.substr(start, comma == std::string::npos ? comma : comma - start);
    int pid = 0;
    if (!ParseInt(item, 1, 1 << 30, &pid)) return false;
    out->push_back(pid);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return !out->empty();
}

}  // namespace

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
    if (flag == "--version") {
      std::cout << VersionLine("narwhal-bench") << "\n";
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::cerr << "narwhal-bench: " << flag << " needs a value\n" << kUsage;
      return false;
    }
    const std::string v = argv[++i];
    bool ok = true;
    try {
      if (flag == "--mode") {
        o->mode_name = v;
      } else if (flag == "--target") {
        o->target = v;
      } else if (flag == "--prefill") {
        o->prefill = v;
      } else if (flag == "--decode") {
        o->decode = v;
      } else if (flag == "--api") {
        ok = v == "completions" || v == "chat";
        o->chat = v == "chat";
      } else if (flag == "--concurrency") {
        ok = ParseInt(v, 1, 100000, &o->concurrency);
      } else if (flag == "--duration-s") {
        ok = ParseDouble(v, 0.001, 86400, &o->duration_s);
      } else if (flag == "--ramp-s") {
        ok = ParseDouble(v, 0, 3600, &o->ramp_s);
      } else if (flag == "--max-tokens") {
        ok = ParseInt(v, 1, 1 << 20, &o->max_tokens);
      } else if (flag == "--prompt-words") {
        ok = ParseInt(v, 0, 1 << 20, &o->prompt_words);
      } else if (flag == "--model") {
        o->model = v;
      } else if (flag == "--pid") {
        ok = ParsePids(v, &o->pids);
      } else if (flag == "--threads") {
        ok = ParseInt(v, 1, 256, &o->threads);
      } else if (flag == "--grpc-channels") {
        ok = ParseInt(v, 1, 1024, &o->grpc_channels);
      } else {
        std::cerr << "narwhal-bench: unknown argument " << flag << "\n" << kUsage;
        return false;
      }
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok) {
      std::cerr << "narwhal-bench: bad value for " << flag << ": " << v << "\n";
      return false;
    }
  }
  if (o->mode_name == "http") {
    o->mode = Mode::kHttp;
  } else if (o->mode_name == "grpc") {
    o->mode = Mode::kGrpc;
  } else if (o->mode_name == "direct") {
    o->mode = Mode::kDirect;
  } else if (o->mode_name == "decode-only") {
    o->mode = Mode::kDecodeOnly;
  } else {
    std::cerr << "narwhal-bench: --mode must be http, grpc, direct or decode-only\n" << kUsage;
    return false;
  }
  if (o->mode == Mode::kDirect ? (o->prefill.empty() || o->decode.empty()) : o->target.empty()) {
    std::cerr << "narwhal-bench: " << o->mode_name
              << (o->mode == Mode::kDirect ? " needs --prefill and --decode\n"
                                           : " needs --target\n")
              << kUsage;
    return false;
  }
  if (o->ramp_s >= o->duration_s) {
    std::cerr << "narwhal-bench: --ramp-s must be shorter than --duration-s\n";
    return false;
  }
  return true;
}

Bodies::Bodies(const Options& o)
    : model_json_(nlohmann::json(o.model).dump()),
      max_tokens_(std::to_string(o.max_tokens)),
      chat_(o.chat),
      path_(o.chat ? "/v1/chat/completions" : "/v1/completions") {
  words_.reserve(8 * static_cast<size_t>(o.prompt_words));
  for (int i = 0; i < o.prompt_words; ++i) words_ += " narwhal";
}

std::string Bodies::Text(long long n) const {
  return "request " + std::to_string(n) + ":" + words_;
}

std::string Bodies::Head(long long n) const {
  const std::string text = Text(n);
  if (chat_) {
    return R"({"model":)" + model_json_ + R"(,"messages":[{"role":"user","content":")" + text +
           R"("}])";
  }
  return R"({"model":)" + model_json_ + R"(,"prompt":")" + text + "\"";
}

std::string Bodies::Stream(long long n) const {
  return Head(n) + R"(,"max_tokens":)" + max_tokens_ + R"(,"stream":true})";
}

std::string Bodies::Prefill(long long n) const {
  return Head(n) +
         R"(,"max_tokens":1,"stream":false,"kv_transfer_params":{"do_remote_decode":true,)"
         R"("do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,)"
         R"("remote_host":null,"remote_port":null}})";
}

std::string Bodies::Decode(long long n, const std::string& descriptor_json) const {
  return Head(n) + R"(,"max_tokens":)" + max_tokens_ + R"(,"stream":true,"kv_transfer_params":)" +
         descriptor_json + "}";
}

}  // namespace narwhal::bench
