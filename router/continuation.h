// Stream continuation (B29, B30): the pieces the router core uses to carry a
// request whose decode engine failed after output had started onto other
// engines, exactly at the token boundary the client has seen.
//
// - ContinuationRefusal(): the B30 reasons a request's own fields give for
//   not continuing it (known at admission).
// - ContinuableFailure(): whether a failed decode leg was an engine fault a
//   continuation may follow (never the client's cancel, the deadline, a
//   client too slow, or an unassemblable answer).
// - ContinuationBody(): the continuation leg's /v1/completions body: the
//   prompt's token ids plus the generated ones as a token-id prompt, the
//   sampling fields kept, the completion budget reduced by what was sent.
// - StreamLedger: follows one request's decode stream across its legs. It
//   records the token ids every leg returns (the engine is asked for them
//   while continuation is enabled), removes `token_ids`/`prompt_token_ids`
//   from what a client that did not ask for them sees, and renders a
//   continuation leg's completions chunks in the client's own format (chat
//   chunks stay chat chunks) under the first leg's id, with usage counting
//   every token of the answer. Not thread-safe (one per request).
#ifndef NARWHAL_ROUTER_CONTINUATION_H_
#define NARWHAL_ROUTER_CONTINUATION_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engines/api.h"
#include "engines/engine_failure.h"
#include "engines/stream_event.h"

namespace narwhal::router {

// How one continuation ended (narwhal_continuations_total{outcome}).
enum class ContinuationOutcome { kContinued, kRefused, kFailed, kNoBudget };
std::string_view ContinuationOutcomeName(ContinuationOutcome o);  // "continued", ...
inline constexpr ContinuationOutcome kContinuationOutcomes[] = {
    ContinuationOutcome::kContinued, ContinuationOutcome::kRefused, ContinuationOutcome::kFailed,
    ContinuationOutcome::kNoBudget};

// Why `body` (a validated client request, either endpoint) cannot be continued
// exactly, or "" when it can: "n" (n > 1), "best_of", "echo",
// "structured_output" (response_format json_schema/json_object, guided_*,
// structured_outputs), "tools", "stop" (stop strings), "logprobs"
// (logprobs, top_logprobs, prompt_logprobs: their offsets and shapes restart
// on a new leg), "penalties" (presence/frequency penalties count only a
// leg's own output).
std::string_view ContinuationRefusal(const nlohmann::json& body);

// Whether the client asked for token ids (return_token_ids true).
bool ClientAsksTokenIds(const nlohmann::json& body);

// Whether a decode leg that failed with `f` may be continued.
bool ContinuableFailure(const engines::EngineFailure& f);

// The completion budget a continuation leg gets after `sent` tokens, or -1
// when it cannot be known: the client's max_completion_tokens (chat) or
// max_tokens, else completions' default of 16, else (chat) what the context
// leaves (`max_model_len` <= 0: unknown); `total` is the continuation
// prompt's length (prompt plus sent tokens).
long long RemainingBudget(engines::Api api, const nlohmann::json& body, long long sent,
                          long long total, long long max_model_len);

// The continuation leg's /v1/completions body for a client `body` (either endpoint):
// `prompt` = `ids` (the prompt's token ids followed by the generated ones),
// max_tokens = `max_tokens`, min_tokens reduced by `sent`, return_token_ids
// true, chat-only and prompt fields removed.
nlohmann::json ContinuationBody(const nlohmann::json& body, const std::vector<uint32_t>& ids,
                                long long sent, long long max_tokens);

// `data` (a valid JSON object) without its `token_ids` and
// `prompt_token_ids` members, at any depth, into *out: a byte-level edit
// that leaves every other byte as the engine sent it. False (and *out
// unspecified) when the payload does not have the expected shape.
bool StripTokenFields(std::string_view data, std::string* out);

class StreamLedger {
 public:
  // The most generated ids one answer records (4 MiB): past it the stream
  // can no longer move exactly (an engine streaming without end).
  static constexpr size_t kMaxIds = size_t{1} << 20;

  StreamLedger(engines::Api api, bool client_wants_ids)
      : api_(api), client_wants_ids_(client_wants_ids) {}

  // Called by a leg's relay for each event before it reaches the client.
  // Records the event's token ids and returns the payload the client gets:
  // the engine's bytes (the first leg, when nothing needs removing), or a
  // rewrite valid until the next call. On a continuation leg (`continuing`)
  // `*event` is adjusted too (usage). Never throws.
  std::string_view Pass(std::string_view data, engines::StreamEvent* event);

  // From now on events come from a continuation leg that starts after the
  // tokens recorded so far.
  void StartContinuation();
  bool continuing() const { return continuing_; }

  // Every token event so far carried its token ids and the prompt's ids were
  // seen: the stream's state can move exactly.
  bool exact() const { return ids_ok_ && has_prompt_ids_; }
  const std::vector<uint32_t>& prompt_ids() const { return prompt_ids_; }
  const std::vector<uint32_t>& generated() const { return generated_; }
  // The continuation prompt: prompt ids followed by the generated ones.
  std::vector<uint32_t> ContinuationPrompt() const;

 private:
  // The first leg's identity (id, created, model, system_fingerprint) from
  // its first JSON event.
  void NoteIdentity(std::string_view data);
  // Removes token fields (`strip`) and, on a continuation leg, renders in
  // the client's format. False when the payload is not a JSON object.
  bool Rewrite(std::string_view data, engines::StreamEvent* event);

  const engines::Api api_;
  const bool client_wants_ids_;
  bool continuing_ = false;
  bool identity_seen_ = false;
  nlohmann::json identity_;  // {id, created, model[, system_fingerprint]}
  bool ids_ok_ = true;
  bool has_prompt_ids_ = false;
  std::vector<uint32_t> prompt_ids_;
  std::vector<uint32_t> generated_;
  size_t base_ = 0;  // tokens sent before the current continuation leg
  std::string out_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_CONTINUATION_H_
