// The NIXL connector rules: leg body edits (B1, B4, B5) and descriptor
// extraction and validation (B2, B3). Pure functions, no I/O.
#ifndef NARWHAL_ENGINES_HTTP_CONNECTOR_H_
#define NARWHAL_ENGINES_HTTP_CONNECTOR_H_

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engines/api.h"
#include "engines/descriptor_contract.h"
#include "engines/prefill_result.h"

namespace narwhal::engines {

// B1: the producer's body. The client body with stream:false, stream_options,
// min_tokens and min_completion_tokens removed, max_tokens:1 (and
// max_completion_tokens:1 when present), and the placeholder
// kv_transfer_params {"do_remote_decode":true,"do_remote_prefill":false,
// "remote_engine_id":null,"remote_block_ids":null,"remote_host":null,
// "remote_port":null} replacing any client value.
nlohmann::json BuildPrefillBody(const nlohmann::json& client_body);

// B4/B5: the consumer's body. The client body with stream:true and, unless
// `same_worker`, the descriptor as kv_transfer_params; with `same_worker` every
// kv_transfer_params (the client's included) is removed. When the client did
// not ask for a stream, stream_options.include_usage is set so the router can
// report usage in the assembled response.
nlohmann::json BuildDecodeBody(const nlohmann::json& client_body, const PrefillResult& handoff,
                               bool same_worker, bool client_streams);

// B2: finds the descriptor in a prefill response body: top-level
// kv_transfer_params, else choices[0].kv_transfer_params. On failure returns
// nullopt and sets *error to the reason (without the "no handoff: " prefix).
std::optional<nlohmann::json> ExtractDescriptor(const nlohmann::json& response,
                                                std::string* error);

// B3: the descriptor contract (engines/descriptor_contract.h) with no
// producer identity and the `pass` host policy. Returns an empty string when
// valid, else the reason.
std::string ValidateDescriptorShape(const nlohmann::json& descriptor);

// B3 in full, before any decode HTTP request: the descriptor contract for
// the producer that issued it, then connector and endpoint
// (`connector_mismatch`, `endpoint_mismatch`). ok() when decode may proceed;
// else the rule and its detail (the caller prefixes "invalid continuation: ").
DescriptorRejection ValidateContinuation(const PrefillResult& handoff,
                                         const std::string& decode_connector, Api decode_endpoint,
                                         RemoteHostPolicy host_policy = RemoteHostPolicy::kPass);

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_CONNECTOR_H_
