#include "python/bindings/waker.h"

#include <utility>

namespace narwhal::python {

namespace py = pybind11;

namespace {

// False once the interpreter is shutting down: no Python code may run then.
bool PythonAlive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() != 0 && Py_IsFinalizing() == 0;
#else
  return Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0;
#endif
}

}  // namespace

Waker::Waker(py::object notify) : notify_(notify.release().ptr()) {}

Waker::~Waker() {
  if (!PythonAlive()) return;  // leaked on purpose: the interpreter is going away
  py::gil_scoped_acquire gil;
  Py_XDECREF(notify_);
}

void Waker::Post(uint64_t token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(token);
    if (scheduled_) return;
    scheduled_ = true;
  }
  if (!PythonAlive()) return;
  py::gil_scoped_acquire gil;
  PyObject* result = PyObject_CallNoArgs(notify_);
  if (result == nullptr) {
    // A closed asyncio loop: nobody waits on it any more.
    PyErr_WriteUnraisable(notify_);
  }
  Py_XDECREF(result);
}

std::vector<uint64_t> Waker::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out = std::move(ready_);
  ready_.clear();
  scheduled_ = false;
  return out;
}

}  // namespace narwhal::python
