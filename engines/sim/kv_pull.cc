#include "engines/sim/kv_pull.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "engines/json_limits.h"
#include "engines/sim/responses.h"

namespace narwhal::sim {

using engines::ParseJson;
namespace {

bool SameBlocks(const nlohmann::json& sent, const nlohmann::json& held) {
  if (sent == held) return true;
  // Pre-HMA descriptors carry a flat list of ids.
  return held.is_array() && held.size() == 1 && sent == held[0];
}

httplib::Result Post(const KvParams& params, const std::string& path, const SimOptions& consumer,
                     const std::string& consumer_request_id, absl::Duration timeout) {
  const std::string& consumer_engine_id = consumer.engine_id;
  const bool tls = !consumer.tls_cert_file.empty();
  const bool v6 = params.remote_host.find(':') != std::string::npos;
  httplib::Client client(absl::StrCat(tls ? "https://" : "http://", v6 ? "[" : "",
                                      params.remote_host, v6 ? "]" : "", ":", params.remote_port),
                         consumer.tls_cert_file, consumer.tls_key_file);
  if (tls) client.enable_server_certificate_verification(false);
  const auto limit = absl::ToChronoMicroseconds(timeout);
  client.set_connection_timeout(limit);
  client.set_read_timeout(limit);
  client.set_write_timeout(limit);
  const nlohmann::json body = {{"remote_engine_id", params.remote_engine_id},
                               {"remote_request_id", params.remote_request_id},
                               {"consumer_engine_id", consumer_engine_id},
                               {"consumer_request_id", consumer_request_id}};
  return client.Post(path, Dump(body), "application/json");
}

}  // namespace

PullReply NotifyRejected(const KvParams& params, const SimOptions& consumer,
                         const std::string& consumer_request_id, absl::Duration timeout) {
  PullReply reply;
  httplib::Result result = Post(params, "/sim/kv/release", consumer, consumer_request_id, timeout);
  if (!result) {
    reply.detail = absl::StrCat("producer ", params.remote_host, ":", params.remote_port,
                                " unreachable (", httplib::to_string(result.error()), ")");
    return reply;
  }
  reply.status = result->status;
  reply.ok = result->status == 200;
  if (!reply.ok) reply.detail = absl::StrCat("producer answered ", result->status);
  return reply;
}

PullReply PullHandoff(const KvParams& params, const SimOptions& consumer,
                      const std::string& consumer_request_id, absl::Duration timeout) {
  PullReply reply;
  httplib::Result result = Post(params, "/sim/kv/pull", consumer, consumer_request_id, timeout);
  if (!result) {
    reply.detail = absl::StrCat("producer ", params.remote_host, ":", params.remote_port,
                                " unreachable (", httplib::to_string(result.error()), ")");
    return reply;
  }
  reply.status = result->status;
  if (result->status != 200) {
    reply.detail = absl::StrCat("producer answered ", result->status);
    return reply;
  }
  const nlohmann::json answer = ParseJson(result->body);
  if (answer.is_discarded() || !answer.is_object() || !answer.contains("remote_block_ids")) {
    reply.detail = "producer answered an unreadable body";
    return reply;
  }
  if (!SameBlocks(params.remote_block_ids, answer["remote_block_ids"])) {
    reply.detail = "descriptor block ids differ from the producer's";
    return reply;
  }
  reply.ok = true;
  return reply;
}

}  // namespace narwhal::sim
