// Waker: wakes one asyncio event loop when legs become ready.
//
// The adapter's loop thread calls Post(token) when an armed Call is ready.
// Tokens are queued, and only the first one queued since the last Take()
// runs `notify` (with the GIL, on the loop thread); `notify` schedules the
// Python side's drain with loop.call_soon_threadsafe, which Take()s every
// queued token and completes their futures. So however many legs finish at
// once, the loop thread takes the GIL once per asyncio loop turn, and no
// asyncio callback ever waits for a C++ thread.
//
// Thread-safe. `notify` is released with the GIL held, whichever thread drops
// the last reference.
#ifndef NARWHAL_PYTHON_BINDINGS_WAKER_H_
#define NARWHAL_PYTHON_BINDINGS_WAKER_H_

#include <cstdint>
#include <mutex>
#include <vector>

#include <pybind11/pybind11.h>

#include "python/bindings/engine_calls.h"

namespace narwhal::python {

class Waker : public ReadyListener {
 public:
  explicit Waker(pybind11::object notify);
  ~Waker() override;
  Waker(const Waker&) = delete;
  Waker& operator=(const Waker&) = delete;

  void Post(uint64_t token) override;
  // The tokens posted since the last Take(); the next Post() notifies again.
  std::vector<uint64_t> Take();

 private:
  PyObject* notify_;  // owned reference
  std::mutex mu_;
  std::vector<uint64_t> ready_;  // guarded by mu_
  bool scheduled_ = false;       // guarded by mu_
};

}  // namespace narwhal::python

#endif  // NARWHAL_PYTHON_BINDINGS_WAKER_H_
