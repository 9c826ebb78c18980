// gRPC's wire protocol as the door reads and writes it (server/grpc/grpc_wire.h):
// the grpc-timeout header, the percent-encoded grpc-message, the 5-byte
// message prefix and the incremental message reader.
#include "server/grpc/grpc_wire.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace narwhal::server {
namespace {

using std::chrono::nanoseconds;

// `s` as the reader's input type.
const uint8_t* WireTestData(const std::string& s) {
  return reinterpret_cast<const uint8_t*>(s.data());
}

// Each message with its prefix, back to back.
std::string WireTestFramed(const std::vector<std::string>& messages) {
  std::string out;
  for (const std::string& m : messages) AppendGrpcMessage(m, &out);
  return out;
}

TEST(GrpcWireTest, TimeoutInEveryUnit) {
  EXPECT_EQ(ParseGrpcTimeout("2H"), std::optional<nanoseconds>(std::chrono::hours(2)));
  EXPECT_EQ(ParseGrpcTimeout("3M"), std::optional<nanoseconds>(std::chrono::minutes(3)));
  EXPECT_EQ(ParseGrpcTimeout("4S"), std::optional<nanoseconds>(std::chrono::seconds(4)));
  EXPECT_EQ(ParseGrpcTimeout("5m"), std::optional<nanoseconds>(std::chrono::milliseconds(5)));
  EXPECT_EQ(ParseGrpcTimeout("6u"), std::optional<nanoseconds>(std::chrono::microseconds(6)));
  EXPECT_EQ(ParseGrpcTimeout("7n"), std::optional<nanoseconds>(nanoseconds(7)));
  EXPECT_EQ(ParseGrpcTimeout("0S"), std::optional<nanoseconds>(nanoseconds(0)));
  EXPECT_EQ(ParseGrpcTimeout("0012m"), std::optional<nanoseconds>(std::chrono::milliseconds(12)));
}

TEST(GrpcWireTest, TimeoutTakesEightDigits) {
  EXPECT_EQ(ParseGrpcTimeout("99999999n"), std::optional<nanoseconds>(nanoseconds(99999999)));
  EXPECT_EQ(ParseGrpcTimeout("12345678S"),
            std::optional<nanoseconds>(std::chrono::seconds(12345678)));
  // The largest value in the largest unit does not overflow: it is taken
  // as the longest timeout, and so is anything past it.
  EXPECT_EQ(ParseGrpcTimeout("99999999H"), std::optional<nanoseconds>(kMaxGrpcTimeout));
  EXPECT_EQ(ParseGrpcTimeout("99999999M"), std::optional<nanoseconds>(kMaxGrpcTimeout));
  EXPECT_EQ(ParseGrpcTimeout("876000H"), std::optional<nanoseconds>(kMaxGrpcTimeout));
  EXPECT_EQ(ParseGrpcTimeout("875999H"), std::optional<nanoseconds>(std::chrono::hours(875999)));
}

TEST(GrpcWireTest, MalformedTimeoutIsRefused) {
  EXPECT_EQ(ParseGrpcTimeout("123456789S"), std::nullopt);  // 9 digits
  EXPECT_EQ(ParseGrpcTimeout(""), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("S"), std::nullopt);    // no digits
  EXPECT_EQ(ParseGrpcTimeout("100"), std::nullopt);  // no unit
  EXPECT_EQ(ParseGrpcTimeout("10x"), std::nullopt);  // not a unit
  EXPECT_EQ(ParseGrpcTimeout("10s"), std::nullopt);  // units are case-sensitive
  EXPECT_EQ(ParseGrpcTimeout("10h"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("1a0S"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("-1S"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("+1S"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout(" 1S"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("1S "), std::nullopt);
}

TEST(GrpcWireTest, MessageKeepsPrintableAsciiAndEncodesTheRest) {
  EXPECT_EQ(PercentEncodeGrpcMessage("unknown method /x.Y/Z (a~b)"), "unknown method /x.Y/Z (a~b)");
  EXPECT_EQ(PercentEncodeGrpcMessage(""), "");
  EXPECT_EQ(PercentEncodeGrpcMessage("100%"), "100%25");
  EXPECT_EQ(PercentEncodeGrpcMessage("a\nb\tc\r"), "a%0Ab%09c%0D");
  EXPECT_EQ(PercentEncodeGrpcMessage(std::string("\0\x1f\x7f", 3)), "%00%1F%7F");
  EXPECT_EQ(PercentEncodeGrpcMessage("caf\xc3\xa9"), "caf%C3%A9");  // upper-case hex
  EXPECT_EQ(PercentEncodeGrpcMessage("\xff\xab"), "%FF%AB");
}

TEST(GrpcWireTest, AppendedMessageHasItsPrefix) {
  std::string out = "x";
  AppendGrpcMessage("abc", &out);
  EXPECT_EQ(out, std::string("x\0\0\0\0\x03"
                             "abc",
                             9));
  std::string empty;
  AppendGrpcMessage("", &empty);
  EXPECT_EQ(empty, std::string(5, '\0'));
  // Big-endian length, every byte of it.
  const std::string big(0x010203, 'q');
  std::string framed;
  AppendGrpcMessage(big, &framed);
  ASSERT_EQ(framed.size(), 5 + big.size());
  EXPECT_EQ(static_cast<uint8_t>(framed[0]), 0);
  EXPECT_EQ(static_cast<uint8_t>(framed[1]), 0x00);
  EXPECT_EQ(static_cast<uint8_t>(framed[2]), 0x01);
  EXPECT_EQ(static_cast<uint8_t>(framed[3]), 0x02);
  EXPECT_EQ(static_cast<uint8_t>(framed[4]), 0x03);
  EXPECT_EQ(framed.substr(5), big);
}

TEST(GrpcWireTest, ReaderTakesTwoMessagesOneByteAtATime) {
  const std::string wire = WireTestFramed({"hello", "world!"});
  GrpcMessageReader reader(1024);
  for (size_t i = 0; i < wire.size(); ++i) {
    ASSERT_EQ(reader.Add(WireTestData(wire) + i, 1), GrpcMessageReader::State::kOk) << i;
    // Between the two messages (after 5 + 5 bytes) nothing is pending.
    EXPECT_EQ(reader.partial(), i + 1 != 10 && i + 1 != wire.size()) << i;
    EXPECT_EQ(reader.messages().size(), i + 1 < 10 ? 0u : (i + 1 < wire.size() ? 1u : 2u)) << i;
  }
  EXPECT_EQ(reader.messages(), (std::vector<std::string>{"hello", "world!"}));
  EXPECT_FALSE(reader.partial());
  EXPECT_EQ(reader.state(), GrpcMessageReader::State::kOk);
}

TEST(GrpcWireTest, ReaderJoinsAMessageSplitAtEveryOffset) {
  const std::string wire = WireTestFramed({"first message", "2nd"});
  for (size_t cut = 0; cut <= wire.size(); ++cut) {
    GrpcMessageReader reader(1024);
    ASSERT_EQ(reader.Add(WireTestData(wire), cut), GrpcMessageReader::State::kOk) << cut;
    EXPECT_EQ(reader.partial(), cut != 0 && cut != 18 && cut != wire.size()) << cut;
    ASSERT_EQ(reader.Add(WireTestData(wire) + cut, wire.size() - cut),
              GrpcMessageReader::State::kOk)
        << cut;
    EXPECT_EQ(reader.messages(), (std::vector<std::string>{"first message", "2nd"})) << cut;
    EXPECT_FALSE(reader.partial()) << cut;
  }
}

TEST(GrpcWireTest, ReaderTakesAnEmptyMessage) {
  const std::string wire = WireTestFramed({"", "a", ""});
  GrpcMessageReader reader(16);
  EXPECT_EQ(reader.Add(WireTestData(wire), wire.size()), GrpcMessageReader::State::kOk);
  EXPECT_EQ(reader.messages(), (std::vector<std::string>{"", "a", ""}));
  EXPECT_FALSE(reader.partial());
  // Nothing at all is nothing.
  GrpcMessageReader idle(16);
  EXPECT_EQ(idle.Add(WireTestData(wire), 0), GrpcMessageReader::State::kOk);
  EXPECT_TRUE(idle.messages().empty());
  EXPECT_FALSE(idle.partial());
}

TEST(GrpcWireTest, ReaderRefusesAMessageOverTheBound) {
  const std::string at_bound = WireTestFramed({std::string(10, 'a')});
  GrpcMessageReader ok(10);
  EXPECT_EQ(ok.Add(WireTestData(at_bound), at_bound.size()), GrpcMessageReader::State::kOk);
  EXPECT_EQ(ok.messages().size(), 1u);

  const std::string wire = WireTestFramed({"ok", std::string(11, 'b'), "later"});
  GrpcMessageReader reader(10);
  // Refused at the prefix: the body need not arrive.
  EXPECT_EQ(reader.Add(WireTestData(wire), 7 + 5), GrpcMessageReader::State::kTooLarge);
  EXPECT_EQ(reader.state(), GrpcMessageReader::State::kTooLarge);
  EXPECT_EQ(reader.announced(), 11u);
  EXPECT_EQ(reader.messages(), (std::vector<std::string>{"ok"}));
  // What follows is ignored.
  EXPECT_EQ(reader.Add(WireTestData(wire) + 12, wire.size() - 12),
            GrpcMessageReader::State::kTooLarge);
  EXPECT_EQ(reader.messages(), (std::vector<std::string>{"ok"}));
}

TEST(GrpcWireTest, ReaderRefusesACompressedMessage) {
  std::string wire(
      "\x01\0\0\0\x03"
      "abc",
      8);
  GrpcMessageReader reader(1024);
  EXPECT_EQ(reader.Add(WireTestData(wire), wire.size()), GrpcMessageReader::State::kCompressed);
  EXPECT_EQ(reader.state(), GrpcMessageReader::State::kCompressed);
  EXPECT_TRUE(reader.messages().empty());
  const std::string more = WireTestFramed({"x"});
  EXPECT_EQ(reader.Add(WireTestData(more), more.size()), GrpcMessageReader::State::kCompressed);
  EXPECT_TRUE(reader.messages().empty());
}

TEST(GrpcWireTest, ReaderIsPartialInsideAPrefixOrABody) {
  const std::string wire = WireTestFramed({"abcdef"});
  GrpcMessageReader reader(1024);
  EXPECT_FALSE(reader.partial());
  ASSERT_EQ(reader.Add(WireTestData(wire), 2), GrpcMessageReader::State::kOk);  // half a prefix
  EXPECT_TRUE(reader.partial());
  EXPECT_TRUE(reader.messages().empty());
  ASSERT_EQ(reader.Add(WireTestData(wire) + 2, 3 + 3), GrpcMessageReader::State::kOk);
  EXPECT_TRUE(reader.partial());  // half a body
  EXPECT_TRUE(reader.messages().empty());
  ASSERT_EQ(reader.Add(WireTestData(wire) + 8, 3), GrpcMessageReader::State::kOk);
  EXPECT_FALSE(reader.partial());
  EXPECT_EQ(reader.messages(), (std::vector<std::string>{"abcdef"}));
}

}  // namespace
}  // namespace narwhal::server
