// narwhal-bench command line.
#ifndef NARWHAL_TOOLS_BENCH_OPTIONS_H_
#define NARWHAL_TOOLS_BENCH_OPTIONS_H_

#include <string>
#include <vector>

namespace narwhal::bench {

extern const char kUsage[];

enum class Mode { kHttp, kGrpc, kDirect, kDecodeOnly };

struct Options {
  Mode mode = Mode::kHttp;
  std::string mode_name;
  std::string target;           // HOST:PORT (http, grpc, decode-only)
  std::string prefill, decode;  // http://HOST:PORT (direct)
  bool chat = false;            // --api chat: /v1/chat/completions, gRPC messages
  int concurrency = 64;
  double duration_s = 10;
  double ramp_s = 0;  // workers start spread evenly over this many seconds
  int max_tokens = 64;
  int prompt_words = 64;
  std::string model = "Qwen/Qwen3-0.6B";
  std::vector<int> pids;  // relay processes whose CPU time is measured
  int threads = 1;        // io_context threads (HTTP modes)
  int grpc_channels = 4;  // separate HTTP/2 connections (grpc mode)
  bool json_out = false;
};

// Returns false (after printing why on stderr) on a bad command line.
bool ParseArgs(int argc, char** argv, Options* o);

// Request bodies, built by string concatenation (the model name is escaped
// once): the client body, and the two legs the direct mode sends itself.
class Bodies {
 public:
  explicit Bodies(const Options& o);
  // The client's streaming request #n.
  std::string Stream(long long n) const;
  // The prefill leg of request #n (SPEC B1: stream:false, max_tokens:1,
  // placeholder kv_transfer_params).
  std::string Prefill(long long n) const;
  // The decode leg of request #n carrying the producer's descriptor.
  std::string Decode(long long n, const std::string& descriptor_json) const;
  // The prompt (or the user message) of request #n.
  std::string Text(long long n) const;
  const char* path() const { return path_; }

 private:
  std::string Head(long long n) const;
  std::string model_json_, words_;
  std::string max_tokens_;
  bool chat_;
  const char* path_;
};

}  // namespace narwhal::bench

#endif  // NARWHAL_TOOLS_BENCH_OPTIONS_H_
