// TuneRuntime: protobuf's per-message log lines cannot flood the process
// log.
#include "server/runtime_tuning.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "narwhal/v1/inference.pb.h"

namespace narwhal::server {
namespace {

TEST(RuntimeTuningTest, ProtobufLogLinesAreRateLimited) {
  TuneRuntime();
  // A GenerateRequest whose `prompt` (a string field) holds invalid UTF-8.
  narwhal::v1::GenerateRequest valid;
  valid.set_prompt("xx");
  std::string bytes = valid.SerializeAsString();
  bytes[bytes.size() - 1] = static_cast<char>(0xff);

  char path[] = "/tmp/runtime_tuning_stderr_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  int refused = 0;
  for (int i = 0; i < 200; ++i) {
    narwhal::v1::GenerateRequest parsed;
    refused += parsed.ParseFromString(bytes) ? 0 : 1;
  }
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  int lines = 0;
  for (const char c : text.str()) lines += c == '\n';
  EXPECT_EQ(refused, 200);
  EXPECT_GE(lines, 1) << "the first line still reaches the log";
  EXPECT_LE(lines, 2) << text.str();
  EXPECT_NE(text.str().find("invalid UTF-8"), std::string::npos) << text.str();
}

}  // namespace
}  // namespace narwhal::server
