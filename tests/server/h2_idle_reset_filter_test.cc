// server/grpc/h2_idle_reset_filter: a client's RST_STREAM for a stream it
// never opened is dropped (gRPC's C core sends one when it cancels a call
// between picking its stream id and writing its HEADERS, and nghttp2 would
// end the whole connection for it); every other byte reaches nghttp2 as it
// came, however the reads split the frames.
#include "server/grpc/h2_idle_reset_filter.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace narwhal::server {
namespace {

const std::string kIdleFilterPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// One frame: 9-byte header and `payload`.
std::string IdleFilterFrame(uint8_t type, uint8_t flags, uint32_t stream,
                            const std::string& payload) {
  std::string f;
  f.push_back(static_cast<char>((payload.size() >> 16) & 0xff));
  f.push_back(static_cast<char>((payload.size() >> 8) & 0xff));
  f.push_back(static_cast<char>(payload.size() & 0xff));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  f.push_back(static_cast<char>((stream >> 24) & 0x7f));
  f.push_back(static_cast<char>((stream >> 16) & 0xff));
  f.push_back(static_cast<char>((stream >> 8) & 0xff));
  f.push_back(static_cast<char>(stream & 0xff));
  return f + payload;
}

std::string IdleFilterRst(uint32_t stream) {
  return IdleFilterFrame(0x3, 0, stream, std::string("\0\0\0\x08", 4));  // CANCEL
}

std::string IdleFilterHeaders(uint32_t stream) {
  return IdleFilterFrame(0x1, 0x4, stream, std::string("\x83\x86", 2));
}

// `bytes` through a new filter in pieces of `piece` bytes.
std::string IdleFilterRun(const std::string& bytes, size_t piece, uint64_t* dropped = nullptr) {
  H2IdleResetFilter filter;
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += piece) {
    const size_t n = std::min(piece, bytes.size() - i);
    filter.Filter(reinterpret_cast<const uint8_t*>(bytes.data() + i), n, &out);
  }
  if (dropped != nullptr) *dropped = filter.dropped();
  return out;
}

TEST(H2IdleResetFilterTest, AResetOfAnOpenedStreamPasses) {
  const std::string settings = IdleFilterFrame(0x4, 0, 0, "");
  const std::string bytes = kIdleFilterPreface + settings + IdleFilterHeaders(1) +
                            IdleFilterFrame(0x0, 0x1, 1, "\0\0\0\0\0") + IdleFilterRst(1) +
                            IdleFilterHeaders(3) + IdleFilterRst(3);
  for (size_t piece = 1; piece <= bytes.size(); ++piece) {
    uint64_t dropped = 7;
    EXPECT_EQ(IdleFilterRun(bytes, piece, &dropped), bytes) << piece;
    EXPECT_EQ(dropped, 0u);
  }
}

TEST(H2IdleResetFilterTest, AResetOfAStreamNeverOpenedIsDroppedAndNothingElse) {
  const std::string before = kIdleFilterPreface + IdleFilterFrame(0x4, 0, 0, "") +
                             IdleFilterHeaders(1) + IdleFilterHeaders(3);
  const std::string after = IdleFilterHeaders(7) + IdleFilterFrame(0x8, 0, 0, "\0\0\x10\0") +
                            IdleFilterRst(7) + IdleFilterFrame(0x0, 0x1, 7, "\0\0\0\0\0");
  // Stream 5 was picked, then cancelled before its HEADERS were written.
  const std::string bytes = before + IdleFilterRst(5) + after;
  for (size_t piece = 1; piece <= bytes.size(); ++piece) {
    uint64_t dropped = 0;
    EXPECT_EQ(IdleFilterRun(bytes, piece, &dropped), before + after) << piece;
    EXPECT_EQ(dropped, 1u);
  }
}

TEST(H2IdleResetFilterTest, OnlyTheClientsOwnStreamsCount) {
  // An even id is the server's (a push it never made); nghttp2 judges it.
  const std::string bytes = kIdleFilterPreface + IdleFilterRst(2) + IdleFilterRst(0);
  uint64_t dropped = 0;
  EXPECT_EQ(IdleFilterRun(bytes, 4096, &dropped), bytes);
  EXPECT_EQ(dropped, 0u);
}

}  // namespace
}  // namespace narwhal::server
