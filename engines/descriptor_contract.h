// The pinned KV handoff descriptor contract (B3 and its typed extension):
// which `kv_transfer_params` a consumer may be given, decided by one table of
// rules, each with its own reason code.
//
// A vLLM consumer that gets a descriptor with a missing or wrongly typed
// field does not fail: it logs "Got invalid KVTransferParams" and recomputes
// the prompt, so disaggregation stops silently (or it answers 200 with no
// tokens). The router refuses such a descriptor before any decode request
// instead, and says which rule it broke. The rules follow vLLM's NIXL pull
// and push schedulers (connector versions 2 to 12):
//
//   reason              rule
//   not_an_object       a non-empty JSON object
//   not_remote_prefill  do_remote_prefill is true
//   missing_engine_id   remote_engine_id is a non-empty string
//   engine_id_mismatch  ... equal to the producer's configured kv_engine_id
//                       (or that id with vLLM's data-parallel "_dp<N>" suffix)
//   malformed_block_ids remote_block_ids is a list of non-negative integers,
//                       or one such list per KV-cache group
//   bad_request_id      remote_request_id is a non-empty string
//   bad_remote_host     remote_host is a non-empty string
//   forbidden_remote_host ... and under policy `pass` not an unspecified,
//                       link-local or cloud metadata address or name
//                       (engines/remote_host_guard.h)
//   remote_host_mismatch  ... equal to the producer's host (policy `match`)
//   bad_remote_port     remote_port is an integer in 1..65535
//   bad_size            tp_size, dcp_size, pp_size, when present, are positive
//                       integers; remote_num_tokens a non-negative integer
//
// Booleans are never integers and 2.0 is not an integer. Every other field
// (remote_blocks_expiry_time, transfer_mode, fields of later versions) is
// opaque: not checked and forwarded unchanged.
#ifndef NARWHAL_ENGINES_DESCRIPTOR_CONTRACT_H_
#define NARWHAL_ENGINES_DESCRIPTOR_CONTRACT_H_

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace narwhal::engines {

// What the router does with a descriptor's remote_host (handoff.remote_host).
enum class RemoteHostPolicy {
  kPass,     // forward it unchanged (vLLM's own routers)
  kRewrite,  // replace it by the producer's configured host (the "localhost"
             // pitfall: a producer without VLLM_NIXL_SIDE_CHANNEL_HOST
             // advertises localhost, which a consumer on another host cannot
             // reach)
  kMatch,    // refuse a descriptor whose host is not the producer's
};
// "pass", "rewrite", "match"; false for anything else.
bool ParseRemoteHostPolicy(std::string_view name, RemoteHostPolicy* out);

// What the router knows about the producer that issued a descriptor.
struct ProducerIdentity {
  // The producer's kv_transfer_config engine_id; empty = not configured (any
  // non-empty id is accepted).
  std::string kv_engine_id;
  // The host of the producer's configured URL.
  std::string host;
};

// One broken rule: `reason` is the code above, `detail` the sentence for the
// client, the journal and the log (no "invalid continuation: " prefix).
struct DescriptorRejection {
  std::string reason;
  std::string detail;
  bool ok() const { return reason.empty(); }
};

// Every reason CheckDescriptor can return: not_an_object, then each rule's.
std::vector<std::string_view> DescriptorRejectionReasons();

// The first rule `descriptor` breaks, or an ok() rejection.
DescriptorRejection CheckDescriptor(const nlohmann::json& descriptor,
                                    const ProducerIdentity& producer, RemoteHostPolicy policy);

// Under kRewrite, sets a string remote_host to `producer.host` (and returns
// whether it changed anything); otherwise leaves the descriptor alone.
bool ApplyRemoteHostPolicy(const ProducerIdentity& producer, RemoteHostPolicy policy,
                           nlohmann::json* descriptor);

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_DESCRIPTOR_CONTRACT_H_
