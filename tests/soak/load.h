// The soak's client load: one thread per concurrent stream, each sending
// requests back to back (HTTP or gRPC, completions or chat, streaming or
// not, some aborted at a random moment) until stopped, recording what every
// request's client saw.
#ifndef NARWHAL_TESTS_SOAK_LOAD_H_
#define NARWHAL_TESTS_SOAK_LOAD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "tests/soak/grpc_client.h"
#include "tests/soak/request_record.h"
#include "tests/soak/soak_options.h"

namespace narwhal::soak {

// Longest a client waits for any request to end. The router's request
// deadline (15 s in the soak's fleet config) ends every request long
// before; a request that reaches this bound hung.
inline constexpr absl::Duration kClientHardTimeout = absl::Seconds(45);

class LoadGenerator {
 public:
  LoadGenerator(const SoakOptions& options, int http_port, const std::string& grpc_target);
  ~LoadGenerator();

  // A random request of client `worker`, its n-th.
  RequestPlan Plan(std::mt19937_64& rng, int worker, uint64_t n) const;
  // Runs one request now, on the calling thread.
  RequestRecord RunOne(const RequestPlan& plan);

  // Starts the client threads.
  void Start();
  // Tells the clients to stop after their current request and waits for
  // them (at most kClientHardTimeout plus a margin per request).
  void Stop();
  // Every request the clients ran (valid after Stop()).
  std::vector<RequestRecord> TakeRecords();

  uint64_t started() const { return started_.load(); }
  uint64_t finished() const { return finished_.load(); }

 private:
  void Worker(int index);

  const SoakOptions options_;
  const int http_port_;
  GrpcClients grpc_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> finished_{0};
  std::vector<std::thread> threads_;
  std::vector<std::vector<RequestRecord>> per_worker_;
};

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_LOAD_H_
