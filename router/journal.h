// Journal: one JSONL row per finished client request, plus event rows
// (SPEC §9). Each row is one write(2) of a whole line to a file opened with
// O_APPEND, so rows are never interleaved or half-written and nothing sits in
// a user-space buffer when the process exits (rows survive SIGTERM).
// Thread-safe.
#ifndef NARWHAL_ROUTER_JOURNAL_H_
#define NARWHAL_ROUTER_JOURNAL_H_

#include <memory>
#include <mutex>
#include <string>

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

namespace narwhal::router {

class Journal {
 public:
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& path);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  void Write(const nlohmann::json& row);
  // Rows written so far by this process.
  long long rows() const;

 private:
  explicit Journal(int fd) : fd_(fd) {}
  int fd_;
  mutable std::mutex mu_;
  long long rows_ = 0;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_JOURNAL_H_
