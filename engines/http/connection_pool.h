// ConnectionPool: idle HTTP/1.1 keep-alive connections to engines, per loop.
//
// Each event loop has its own pool (an Asio service of the loop's
// io_context), so a connection is only ever used by the thread that owns it
// and the pool needs no lock. A leg takes an idle connection to its engine or
// opens a new one, and gives it back only when its exchange ended cleanly
// with keep-alive; a leg that ends abnormally (cancelled, timed out, broken)
// closes its connection instead. Idle connections are bounded per engine and
// closed once idle long enough that the engine may have closed them (vLLM's
// uvicorn keeps idle connections for 5 s): a sweep on the loop's timer closes
// them even when no leg comes back, so descriptors return to baseline after a
// load.
#ifndef NARWHAL_ENGINES_HTTP_CONNECTION_POOL_H_
#define NARWHAL_ENGINES_HTTP_CONNECTION_POOL_H_

#include <boost/asio/execution_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engines/api.h"
#include "engines/clock.h"
#include "engines/http/engine_socket.h"

namespace narwhal::engines {

class ConnectionPool : public boost::asio::execution_context::service {
 public:
  using Socket = EngineSocket;
  static inline boost::asio::execution_context::id id;

  // Idle connections older than this are closed instead of reused.
  static constexpr MonoClock::duration kMaxIdle = std::chrono::seconds(4);

  explicit ConnectionPool(boost::asio::execution_context& context)
      : boost::asio::execution_context::service(context) {}

  // The pool of the loop that runs `executor`.
  template <typename Executor>
  static ConnectionPool& Of(const Executor& executor) {
    return boost::asio::use_service<ConnectionPool>(executor.context());
  }

  // An idle connection to `key` ("host:port", "https://host:port" for TLS
  // connections) that still looks open, if any.
  std::optional<Socket> Take(const std::string& key, MonoTime now);
  // Keeps `socket` for reuse unless `key` already has `max_idle` idle ones.
  // `clock` and `executor` (this pool's loop) arm the idle sweep.
  void Put(const std::string& key, Socket socket, const Clock& clock, const Executor& executor,
           size_t max_idle);

  // Cached resolution of `key` (the first connect resolves it).
  const std::vector<boost::asio::ip::tcp::endpoint>* Endpoints(const std::string& key) const;
  void SetEndpoints(const std::string& key, std::vector<boost::asio::ip::tcp::endpoint> eps);
  void ForgetEndpoints(const std::string& key) { endpoints_.erase(key); }

  size_t idle(const std::string& key) const;

 private:
  void shutdown() override {
    sweep_.reset();
    idle_.clear();
  }
  // Closes connections idle longer than kMaxIdle; re-arms while any remain.
  void Sweep(const Clock& clock);
  void ArmSweep(const Clock& clock, MonoTime at);

  struct Idle {
    Socket socket;
    MonoTime since;
  };
  std::map<std::string, std::deque<Idle>> idle_;
  std::map<std::string, std::vector<boost::asio::ip::tcp::endpoint>> endpoints_;
  std::unique_ptr<Timer> sweep_;
  bool sweep_armed_ = false;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_CONNECTION_POOL_H_
