// IoLoops: the event-loop threads of the data plane.
//
// N threads (serving.io_threads; default one per core the container may use,
// engines/http/cpu_limit.h), each running its own
// io_context, so everything of one request — its client connection, its
// attempt loop and its engine legs — stays on one thread: a relayed frame
// never crosses threads. A new client connection goes to the loop Place()
// picks (engines/http/loop_placement.h: by default the loops fill in order
// while they keep up, or in turn).
//
// Thread-safe. Stop() (or the destructor) ends every loop after the work
// already posted has been abandoned; callers drain their requests first.
#ifndef NARWHAL_ENGINES_HTTP_IO_LOOPS_H_
#define NARWHAL_ENGINES_HTTP_IO_LOOPS_H_

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engines/clock.h"
#include "engines/http/loop_placement.h"

namespace narwhal::engines {

class IoLoops {
 public:
  // `threads` <= 0 means one per core, capped by the container's CPU limit.
  explicit IoLoops(int threads, LoopPlacementOptions placement = {});
  ~IoLoops();
  IoLoops(const IoLoops&) = delete;
  IoLoops& operator=(const IoLoops&) = delete;

  int size() const { return static_cast<int>(loops_.size()); }
  // The next loop in turn (round robin).
  Executor Next();
  // The loop for a new client connection (LoopPlacement).
  Executor Place();
  Executor executor(int i) const { return loops_[i]->context.get_executor(); }
  boost::asio::io_context& context(int i) { return loops_[i]->context; }
  // True on one of this pool's loop threads (blocking there is a bug).
  bool OnLoopThread() const;

  void Stop();

 private:
  struct Loop {
    boost::asio::io_context context{1};
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
    std::thread thread;
    clockid_t cpu_clock{};  // the thread's CPU-time clock
    bool has_cpu_clock = false;
  };
  std::vector<std::unique_ptr<Loop>> loops_;
  std::atomic<unsigned> next_{0};
  std::mutex placement_mu_;
  LoopPlacement placement_;  // guarded by placement_mu_
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_IO_LOOPS_H_
