// Serving one validated inference request: latency, KV handoff (producer
// descriptor or consumer pull), deterministic tokens, and the stream- and
// body-shaping faults. Internal to narwhal_sim.
//
// Faults handled here (drop_connection, delay_headers and http_status are
// applied by the route before a Generation exists):
//
//   kind                        streaming                 non-streaming
//   silent_before_first_token   headers, then silence     no response, silence
//   metadata_then_silence       N metadata events, silence  no response, silence
//   stall_after_tokens          N tokens, then silence    no response, silence
//   close_before_done           N tokens, clean end of    latency, then the
//                               body without [DONE]       connection drops
//   done_before_token           (chat: role chunk) [DONE] 200, empty text,
//                                                         finish_reason "stop"
//   error_in_stream             N tokens, error frame,    HTTP <code> (500 when
//                               [DONE]                    not an int 100..599)
//   slow_tokens                 that token interval       that interval
//   recompute (consumer)        no pull: the prompt's prefill time, usage
//                               cached_tokens 0 (the prefix cache's hit),
//                               vllm:nixl_num_failed_transfers_total + 1
//   no_descriptor, descriptor_without_engine_id, malformed_block_ids:
//                               (prefill answers are never streamed)
//
// A silence lasts until the client goes away, the engine stops or
// max_silence_s passes; then the connection closes without further bytes.
// Chat streams send the role chunk right before the first token.
#ifndef NARWHAL_ENGINES_SIM_GENERATION_H_
#define NARWHAL_ENGINES_SIM_GENERATION_H_

#include <httplib.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engines/sim/engine_state.h"
#include "engines/sim/fault_rules.h"
#include "engines/sim/openai_request.h"
#include "engines/sim/responses.h"
#include "engines/sim/waiter.h"

namespace narwhal::sim {

class Generation {
 public:
  // `seq` is the request's record in state.requests; `state` must outlive
  // this object.
  Generation(EngineState& state, InferenceRequest request, std::string request_id,
             std::optional<FaultRule> fault, uint64_t seq, Waiter waiter);
  ~Generation();

  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Non-streaming: fills `res` and returns true, or returns false when the
  // connection must close without a response.
  bool Respond(httplib::Response& res);

  // Streaming: writes every event into `sink`. Returns true when the body
  // should end cleanly (terminating chunk), false to cut the connection.
  bool Stream(httplib::DataSink& sink);

 private:
  enum class Prelude { kReady, kLoadFailed, kClientGone, kStopped };

  bool Is(FaultKind kind) const { return fault_.has_value() && fault_->kind == kind; }
  Prelude RunPrelude();
  // Ends a silence: records how it ended and returns false (cut).
  bool Silence();
  bool Write(httplib::DataSink& sink, const std::string& data);
  // invalid_text: the token text's mark, and the event rewritten so that the
  // mark's escape becomes a raw 0xFF byte or an unpaired surrogate escape
  // (`\udcff`, as Python's json writes one), as the fault's shape says.
  static constexpr const char* kInvalidMark = "\x01";
  void MakeTextInvalid(std::string* event) const;
  void End(RequestEnd end);
  // A completed generation's full blocks (prompt and `count` generated
  // tokens) go to the prefix cache, as vLLM's do.
  void CacheGenerated(int count);
  // The first `count` generated ids.
  std::vector<uint32_t> Generated(int count) const;
  // return_token_ids: what the next stream chunk carries — the prompt's ids
  // on the first chunk, `generated` (a token chunk's delta) when given.
  TokenIds ChunkIds(std::optional<uint32_t> generated);
  void EndAfterWait(WaitEnd how);
  void SetStatus(int status);
  void CountToken();
  OrderedJson Descriptor();
  absl::Duration TokenInterval() const;
  // Usage with cached_tokens when the prefix cache or prompt_tokens_details
  // is on.
  Usage MakeUsage(int completion_tokens) const;

  EngineState& state_;
  const InferenceRequest request_;
  const std::optional<FaultRule> fault_;
  const uint64_t seq_;
  const Waiter waiter_;
  ResponseContext ctx_;
  // The ids this request generates, max_tokens of them
  // (engines/sim/text_gen.h).
  const std::vector<uint32_t> generated_ids_;
  bool prompt_ids_sent_ = false;
  int tokens_sent_ = 0;
  // Prompt tokens not computed here: the prefix cache's hit (local prefill)
  // or the pulled ones but the last (a consumer that pulled its handoff).
  int cached_tokens_ = 0;
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_GENERATION_H_
