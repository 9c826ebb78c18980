#include "server/idle_memory_release.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>

#include "server/log.h"

namespace narwhal::server {
namespace {

// Resident set size in MiB from /proc/self/statm (-1 when unreadable).
double RssMib() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long size = 0;
  long resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  if (n != 2) return -1;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) /
         (1024.0 * 1024.0);
}

std::string Mib(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f MiB", v);
  return buf;
}

}  // namespace

bool IdleReleasePolicy::Observe(int inflight) {
  if (inflight > 0) {
    busy_since_release_ = true;
    idle_run_ = 0;
    return false;
  }
  if (!busy_since_release_) return false;
  if (++idle_run_ < idle_samples_) return false;
  busy_since_release_ = false;
  idle_run_ = 0;
  return true;
}

void ReleaseFreedHeap() {
  const double before = RssMib();
  const bool released = ::malloc_trim(0) != 0;
  const double after = RssMib();
  // Logged only when the heap gave memory back.
  if (!released || after >= before) return;
  LogInfo("narwhal-serve: idle: returned freed heap to the system (RSS " + Mib(before) + " -> " +
          Mib(after) + ")");
}

IdleMemoryRelease::IdleMemoryRelease(std::function<int()> inflight,
                                     std::chrono::milliseconds sample, int idle_samples,
                                     Release release)
    : inflight_(std::move(inflight)),
      sample_(sample),
      policy_(idle_samples),
      release_(release ? std::move(release) : Release(ReleaseFreedHeap)),
      thread_([this] { Loop(); }) {}

IdleMemoryRelease::~IdleMemoryRelease() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void IdleMemoryRelease::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, sample_, [this] { return stop_; })) {
    lock.unlock();
    if (policy_.Observe(inflight_())) release_();
    lock.lock();
  }
}

}  // namespace narwhal::server
