// The consumer side of a handoff: pulls a producer's blocks over HTTP
// (POST http://<remote_host>:<remote_port>/sim/kv/pull), standing in for a
// NIXL read. A consumer serving HTTPS pulls over HTTPS, presenting its own
// certificate (producers of one test fleet share a CA; the producer's
// certificate is not checked: this stands in for NIXL's own transport, which
// the router's engine.tls does not cover).
//
// Request body: {"remote_engine_id", "remote_request_id",
// "consumer_engine_id", "consumer_request_id"}. The producer answers 200
// {"remote_request_id", "remote_block_ids", "remote_num_tokens"} and marks
// the entry consumed; 404 unknown (or another engine id), 409 already
// consumed or released, 410 expired. POST /sim/kv/release takes the same body
// and answers the same way (200 {"remote_request_id", ...}: freed).
#ifndef NARWHAL_ENGINES_SIM_KV_PULL_H_
#define NARWHAL_ENGINES_SIM_KV_PULL_H_

#include <string>

#include "absl/time/time.h"
#include "engines/sim/openai_request.h"
#include "engines/sim/sim_options.h"

namespace narwhal::sim {

struct PullReply {
  bool ok = false;
  int status = 0;      // the producer's HTTP status; 0 = no answer
  std::string detail;  // why the pull failed (for the log)
};

// Pulls the handoff `params` names (params.kind must be kConsumer). Fails
// when the producer is unreachable, does not answer within `timeout`,
// answers non-200, or returns blocks that differ from the descriptor's
// remote_block_ids (a flat list matches a one-group list with the same ids).
// `consumer`: the pulling engine's options (its engine id and TLS files).
PullReply PullHandoff(const KvParams& params, const SimOptions& consumer,
                      const std::string& consumer_request_id, absl::Duration timeout);

// The consumer refused the request carrying `params` before admission: tells
// the producer to free the handoff (POST /sim/kv/release, same body as a
// pull), as vLLM's notify_kv_transfer_request_rejected makes the NIXL
// connector do. ok when the producer answered 200.
PullReply NotifyRejected(const KvParams& params, const SimOptions& consumer,
                         const std::string& consumer_request_id, absl::Duration timeout);

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_KV_PULL_H_
