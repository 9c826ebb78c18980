// IdleMemoryRelease: hands the heap that a load left behind back to the
// system once the router is idle.
//
// glibc keeps freed memory in its per-thread malloc arenas: after thousands
// of streams end, RSS stays near its peak although nothing is live. A
// background thread samples the router's in-flight count once per `sample`
// and, after the router served traffic and then stayed idle for
// `idle_samples` consecutive samples, calls malloc_trim(0) once — never while
// a request is in flight, never twice for one idle period. Each release is a
// log line with the RSS before and after.
#ifndef NARWHAL_SERVER_IDLE_MEMORY_RELEASE_H_
#define NARWHAL_SERVER_IDLE_MEMORY_RELEASE_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace narwhal::server {

// The decision alone, fed one in-flight sample at a time.
class IdleReleasePolicy {
 public:
  explicit IdleReleasePolicy(int idle_samples) : idle_samples_(idle_samples) {}
  // True when this sample should trigger a release.
  bool Observe(int inflight);

 private:
  const int idle_samples_;
  bool busy_since_release_ = false;
  int idle_run_ = 0;
};

class IdleMemoryRelease {
 public:
  using Release = std::function<void()>;
  // `inflight` is sampled; `release` (default: malloc_trim with a log line)
  // runs on the background thread.
  IdleMemoryRelease(std::function<int()> inflight,
                    std::chrono::milliseconds sample = std::chrono::seconds(1),
                    int idle_samples = 3, Release release = nullptr);
  ~IdleMemoryRelease();
  IdleMemoryRelease(const IdleMemoryRelease&) = delete;
  IdleMemoryRelease& operator=(const IdleMemoryRelease&) = delete;

 private:
  void Loop();

  std::function<int()> inflight_;
  const std::chrono::milliseconds sample_;
  IdleReleasePolicy policy_;
  Release release_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// malloc_trim(0), logged with the process's RSS before and after.
void ReleaseFreedHeap();

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_IDLE_MEMORY_RELEASE_H_
