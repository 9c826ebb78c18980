// Cost of the decode hot path per upstream chunk: SSE framing (SseReader)
// plus classification (StreamClassifier, one per leg as a real leg holds it)
// of typical vLLM chunks. Goal: under 2 us per chunk. Time per iteration =
// time per chunk.
//
//   build/bin/sse_bench
//   build/bin/sse_bench --benchmark_filter=Completion
#include <string>
#include <string_view>

#include <benchmark/benchmark.h>

#include "engines/http/sse_reader.h"
#include "engines/http/stream_classifier.h"
#include "engines/stream_event.h"

namespace narwhal::engines {
namespace {

// A completions chunk as vLLM 0.2x streams it (~300 bytes of JSON).
constexpr std::string_view kCompletionChunk =
    R"({"id":"cmpl-7f3c9e2a1d4b4c1e9a530d6f2b8c4e11","object":"text_completion",)"
    R"("created":1754400001,"model":"Qwen/Qwen3-0.6B","choices":[{"index":0,)"
    R"("text":" Paris","logprobs":null,"finish_reason":null,"stop_reason":null,)"
    R"("prompt_logprobs":null}],"usage":null,"system_fingerprint":"vllm-0.29.1-tp2-3f9a1c0b"})";

// A chat content chunk.
constexpr std::string_view kChatChunk =
    R"({"id":"chatcmpl-7f3c9e2a1d4b4c1e9a530d6f2b8c4e11","object":"chat.completion.chunk",)"
    R"("created":1754400001,"model":"Qwen/Qwen3-0.6B","choices":[{"index":0,)"
    R"("delta":{"content":" Paris","reasoning_content":null,"tool_calls":[]},"logprobs":null,)"
    R"("finish_reason":null,"stop_reason":null}],"usage":null})";

// A chat chunk of the token-ID dialect (token_ids counted).
constexpr std::string_view kTokenIdsChunk =
    R"({"id":"chatcmpl-7f3c9e2a1d4b4c1e9a530d6f2b8c4e11","object":"chat.completion.chunk",)"
    R"("created":1754400001,"model":"Qwen/Qwen3-0.6B","choices":[{"index":0,)"
    R"("delta":{"content":" Paris is"},"logprobs":null,"finish_reason":null,)"
    R"("token_ids":[12095,374]}]})";

std::string Frame(std::string_view chunk) { return "data: " + std::string(chunk) + "\n\n"; }

// One transport read per event, as an engine flushing each chunk produces.
void SseAndClassify(benchmark::State& state, std::string_view chunk) {
  const std::string framed = Frame(chunk);
  SseReader reader;
  StreamClassifier classifier;
  StreamEvent event;
  int tokens = 0;
  const SseReader::EventFn on_event = [&](std::string_view data) {
    classifier.Classify(data, &event);
    tokens += event.tokens;
    return true;
  };
  for (auto _ : state) {
    reader.Feed(framed, on_event);
    benchmark::DoNotOptimize(tokens);
  }
  if (tokens != static_cast<int>(state.iterations()) * (chunk == kTokenIdsChunk ? 2 : 1)) {
    state.SkipWithError("chunk was not classified as a token");
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(framed.size()));
  state.SetLabel(std::to_string(chunk.size()) + "-byte chunk");
}

// The same with each event split across two reads (mid-JSON), the worst
// common transport pattern.
void SseSplitAndClassify(benchmark::State& state, std::string_view chunk) {
  const std::string framed = Frame(chunk);
  const std::string_view all(framed);
  const std::string_view first = all.substr(0, all.size() / 2);
  const std::string_view second = all.substr(all.size() / 2);
  SseReader reader;
  StreamClassifier classifier;
  StreamEvent event;
  int tokens = 0;
  const SseReader::EventFn on_event = [&](std::string_view data) {
    classifier.Classify(data, &event);
    tokens += event.tokens;
    return true;
  };
  for (auto _ : state) {
    reader.Feed(first, on_event);
    reader.Feed(second, on_event);
    benchmark::DoNotOptimize(tokens);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(std::to_string(chunk.size()) + "-byte chunk, 2 reads");
}

// The parts on their own.
void SseOnly(benchmark::State& state, std::string_view chunk) {
  const std::string framed = Frame(chunk);
  SseReader reader;
  size_t bytes = 0;
  const SseReader::EventFn on_event = [&](std::string_view data) {
    bytes += data.size();
    return true;
  };
  for (auto _ : state) {
    reader.Feed(framed, on_event);
    benchmark::DoNotOptimize(bytes);
  }
  state.SetItemsProcessed(state.iterations());
}

void ClassifyOnly(benchmark::State& state, std::string_view chunk) {
  StreamClassifier classifier;
  StreamEvent event;
  for (auto _ : state) {
    classifier.Classify(chunk, &event);
    benchmark::DoNotOptimize(event.tokens);
  }
  state.SetItemsProcessed(state.iterations());
}

// The free function, for callers without a classifier of their own (it uses
// one per thread).
void ClassifyEventOnly(benchmark::State& state, std::string_view chunk) {
  StreamEvent event;
  for (auto _ : state) {
    ClassifyEvent(chunk, &event);
    benchmark::DoNotOptimize(event.tokens);
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK_CAPTURE(SseAndClassify, Completion, kCompletionChunk);
BENCHMARK_CAPTURE(SseAndClassify, Chat, kChatChunk);
BENCHMARK_CAPTURE(SseAndClassify, ChatTokenIds, kTokenIdsChunk);
BENCHMARK_CAPTURE(SseSplitAndClassify, Completion, kCompletionChunk);
BENCHMARK_CAPTURE(SseSplitAndClassify, Chat, kChatChunk);
BENCHMARK_CAPTURE(SseOnly, Completion, kCompletionChunk);
BENCHMARK_CAPTURE(SseOnly, Chat, kChatChunk);
BENCHMARK_CAPTURE(ClassifyOnly, Completion, kCompletionChunk);
BENCHMARK_CAPTURE(ClassifyOnly, Chat, kChatChunk);
BENCHMARK_CAPTURE(ClassifyOnly, ChatTokenIds, kTokenIdsChunk);
BENCHMARK_CAPTURE(ClassifyEventOnly, Completion, kCompletionChunk);

}  // namespace
}  // namespace narwhal::engines

BENCHMARK_MAIN();
