// PrefillResult (B2, B6): the backend-owned KV handoff descriptor bound to the
// producer that issued it.
//
// Immutable once built. EngineClient::Prefill() returns it and it is passed
// unchanged to EngineClient::Decode(); parameters() hands out a detached copy,
// so inspecting or editing that copy never changes what decode sends.
//
// Single use: a handoff feeds at most one decode leg. Claim() marks it used
// (copies share the mark); EngineClient::Decode() claims it before anything
// else and refuses a used one (`reused_handoff`) without contacting an
// engine, so a descriptor can never make two consumers pull the same blocks
// or a consumer answer from a previous request's KV.
#ifndef NARWHAL_ENGINES_PREFILL_RESULT_H_
#define NARWHAL_ENGINES_PREFILL_RESULT_H_

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "engines/api.h"

namespace narwhal::engines {

class PrefillResult {
 public:
  PrefillResult(std::string producer_iid, std::string producer_url, Api endpoint,
                std::string backend_request_id, std::string connector, nlohmann::json descriptor,
                std::string producer_kv_engine_id = "")
      : producer_iid_(std::move(producer_iid)),
        producer_url_(std::move(producer_url)),
        endpoint_(endpoint),
        backend_request_id_(std::move(backend_request_id)),
        connector_(std::move(connector)),
        descriptor_(std::move(descriptor)),
        producer_kv_engine_id_(std::move(producer_kv_engine_id)) {}

  // No handoff: the decode leg computes the prompt itself on `engine` (B28's
  // local prefill). Decode sends no kv_transfer_params and there is nothing
  // to validate or release.
  static PrefillResult Local(std::string engine_iid, std::string engine_url, Api endpoint) {
    PrefillResult r(std::move(engine_iid), std::move(engine_url), endpoint, "", "",
                    nlohmann::json::object());
    r.local_ = true;
    return r;
  }
  bool local() const { return local_; }

  const std::string& producer_iid() const { return producer_iid_; }
  const std::string& producer_url() const { return producer_url_; }
  Api endpoint() const { return endpoint_; }
  const std::string& backend_request_id() const { return backend_request_id_; }
  const std::string& connector() const { return connector_; }
  // The producer's configured kv_transfer_config engine_id; empty = unknown.
  const std::string& producer_kv_engine_id() const { return producer_kv_engine_id_; }

  // Marks the handoff used; true only for the first call on it or any copy.
  bool Claim() const { return !claimed_->exchange(true); }
  bool claimed() const { return claimed_->load(); }

  // A detached copy of the descriptor (B6).
  nlohmann::json parameters() const { return descriptor_; }
  // Read-only view for the adapter (sent verbatim as kv_transfer_params).
  const nlohmann::json& descriptor() const { return descriptor_; }

 private:
  std::string producer_iid_;
  std::string producer_url_;
  Api endpoint_;
  std::string backend_request_id_;
  std::string connector_;
  nlohmann::json descriptor_;
  std::string producer_kv_engine_id_;
  bool local_ = false;
  std::shared_ptr<std::atomic<bool>> claimed_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_PREFILL_RESULT_H_
