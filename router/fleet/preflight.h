// Preflight (B18): validates the fleet before (or while) serving.
//
// Gates, in order:
//   reach    - every engine answers GET /health 200 within health_timeout_s;
//   contract - with engine_contract: every engine matches it (/version,
//              max_model_len, connector, system_fingerprint). A mismatch also
//              skips produce and consume;
//   model    - every engine serves the fleet's model (/v1/models);
//   produce  - every prefill-capable engine exports a KV handoff;
//   consume  - every role-permitted producer->consumer pair (prefill->decode,
//              and `both` engines in either direction; never an engine with
//              itself) transfers a fresh handoff: the consumer produces its
//              first token within first_token_timeout_s and ends with [DONE].
//              A first-token miss is an "unconfirmed transfer". Pairs are a
//              full mesh of ordered pairs, or a ring (each producer with one
//              consumer, every engine covered; see PreflightPairs).
// Engines that fail reach are skipped by later gates (reported `skipped`);
// engines that fail model are skipped by produce and consume.
//
// Bounds: control requests (reach, contract, model) take at most
// engine.health_timeout_s each. A probe's prefill leg is bounded by
// engine.first_token_timeout_s; its decode leg's first token by the client's
// first-token budget (HttpEngineClient is configured with the same
// engine.first_token_timeout_s); each pair attempt as a whole, and each
// produce check, by serving.request_timeout_s. Checks and pairs run one at a
// time, in config order. Every pair gets a fresh handoff (never the produce
// gate's, never another pair's) for a prompt with a unique prefix, and
// decodes max_tokens 2.
#ifndef NARWHAL_ROUTER_FLEET_PREFLIGHT_H_
#define NARWHAL_ROUTER_FLEET_PREFLIGHT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engines/engine_client.h"
#include "router/common/clock.h"
#include "router/common/settings.h"

namespace narwhal::router {

enum class PairMode { kMesh, kRing };

// "mesh" / "ring".
const char* PairModeName(PairMode mode);
// Parses "mesh" or "ring"; false (and *mode untouched) otherwise.
bool ParsePairMode(std::string_view name, PairMode* mode);

struct PreflightCheck {
  std::string gate;  // reach | contract | model | produce
  std::string iid;
  std::string outcome;  // passed | failed | skipped
  std::string detail;
  double duration_s = 0;
};

struct PreflightPair {
  std::string producer;
  std::string consumer;
  // passed | failed | unconfirmed_transfer | producer_failed | skipped
  std::string outcome;
  std::string detail;
  double prefill_s = 0;      // producer leg duration
  double first_token_s = 0;  // decode dispatch to first token (0 when none)
  double duration_s = 0;
};

struct PreflightGate {
  std::string name;  // reach | contract | model | produce | consume
  bool passed = true;
  bool skipped = false;
  std::string detail;  // first failure, or a summary
  double duration_s = 0;
};

struct PreflightReport {
  bool passed = false;
  double started_at = 0;  // unix seconds
  double duration_s = 0;
  PairMode pairs = PairMode::kMesh;
  std::vector<PreflightGate> gates;
  std::vector<PreflightCheck> checks;
  std::vector<PreflightPair> transfers;

  nlohmann::json ToJson() const;
  // A human-readable table (narwhal-check's default output).
  std::string ToTable() const;
};

// Runs every gate against the engines in `settings` (ignoring breaker state),
// one check at a time; each leg runs on `executor` (an event loop) while the
// calling thread, which must not be that loop's, waits for it.
PreflightReport RunPreflight(const Settings& settings, engines::AsyncEngineClient& client,
                             const engines::Executor& executor, const Clock& clock, PairMode pairs);

// The ordered role-permitted pairs for `mode` (exposed for tests), as
// (producer iid, consumer iid). Producers P are the prefill-capable engines
// and consumers C the decode-capable ones, both in config order; a pair
// never joins an engine with itself.
//   mesh: every (p, c) with p != c, producer-major.
//   ring: with n = max(|P|, |C|), pair k (k = 0..n-1) joins P[k mod |P|] to
//         the first consumer at or after C[k mod |C|] (cyclically) that is
//         not the producer itself; duplicates are dropped. Then every engine
//         that has a permitted partner in some role but appears in no pair in
//         that role gets one more pair, with its first permitted partner in
//         config order. So every producer and every consumer is covered with
//         about max(|P|, |C|) pairs: 2 prefill + 2 decode -> p0>d0, p1>d1;
//         three `both` engines -> e0>e1, e1>e2, e2>e0.
std::vector<std::pair<std::string, std::string>> PreflightPairs(const Settings& settings,
                                                                PairMode mode);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_PREFLIGHT_H_
