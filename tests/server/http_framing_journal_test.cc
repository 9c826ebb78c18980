// The HTTP door's framing refusals and the journal: every refusal of a
// generation request whose request line arrived — bad header syntax, bad
// chunk encoding (a bare LF in chunked framing included), too many trailer
// fields (431), Content-Length with Transfer-Encoding, an unsupported
// coding, a bad Content-Length, too many or too large headers (431), a body
// over the limit (413), headers that stop arriving (408) — writes one row,
// `terminal: invalid`, with the status sent and the x-request-id sent; a
// byte stream that never made a request line writes none.
#include <fstream>
#include <string>
#include <vector>

#include "server/http/request_parser.h"
#include "server/http/routes.h"
#include "tests/fakes/fake_clock.h"
#include "tests/server/http_door_harness.h"

namespace narwhal::server::http_door_test {
namespace {

class HttpDoorFramingJournalTest : public HttpDoorTest {
 protected:
  // The journal's clock when a test sets it (it outlives the journal,
  // which TearDown closes).
  nt::FakeClock journal_clock_;

  // Sends `bytes` on a fresh connection and expects `status`, the connection
  // closed after it, and one journal row for it.
  void ExpectJournaledRefusal(const std::string& bytes, int status, const std::string& reason,
                              const std::string& api = "completions") {
    SCOPED_TRACE(bytes.substr(0, 120));
    const size_t before = JournalRows().size();
    auto c = Connect();
    c->Send(bytes);
    auto r = c->Read(3000ms);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    EXPECT_FALSE(r->keep_alive);
    EXPECT_EQ(json::parse(r->body)["error"]["code"], status);
    EXPECT_TRUE(c->WaitClosed(3000ms));
    const std::vector<json> rows = JournalRows();
    ASSERT_EQ(rows.size(), before + 1);
    const json& row = rows.back();
    EXPECT_EQ(row["terminal"], "invalid");
    EXPECT_EQ(row["status"], status);
    EXPECT_EQ(row["reason"], reason);
    EXPECT_EQ(row["api"], api);
    EXPECT_EQ(row["rid"], r->Header("x-request-id"));
    EXPECT_EQ(r->Header("x-request-id").size(), 32u);
  }

  // Sends `bytes` and expects `status` (or, for 0, the connection closed
  // without an answer), and no journal row.
  void ExpectUnjournaled(const std::string& bytes, int status) {
    SCOPED_TRACE(bytes.substr(0, 120));
    const size_t before = JournalRows().size();
    auto c = Connect();
    c->Send(bytes);
    if (status != 0) {
      auto r = c->Read(3000ms);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, status);
    }
    EXPECT_TRUE(c->WaitClosed(3000ms));
    if (status == 0) {
      EXPECT_TRUE(c->pending().empty());
    }
    EXPECT_EQ(JournalRows().size(), before);
  }
};

constexpr char kHead[] = "POST /v1/completions HTTP/1.1\r\nHost: t\r\n";

TEST_F(HttpDoorFramingJournalTest, BadHeaderSyntaxIs400AndJournaled) {
  Start();
  ExpectJournaledRefusal(std::string(kHead) + "No colon here\r\nContent-Length: 2\r\n\r\n{}", 400,
                         "malformed_http");
}

TEST_F(HttpDoorFramingJournalTest, BadContentLengthIs400AndJournaled) {
  Start();
  ExpectJournaledRefusal(std::string(kHead) + "Content-Length: 12abc\r\n\r\n{}", 400,
                         "malformed_http");
  ExpectJournaledRefusal(std::string(kHead) + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
                         400, "malformed_http");
}

TEST_F(HttpDoorFramingJournalTest, BadChunkEncodingIs400AndJournaled) {
  Start();
  ExpectJournaledRefusal(std::string(kHead) + "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n",
                         400, "malformed_http");
  // A chunk whose data overruns its size.
  ExpectJournaledRefusal(
      std::string(kHead) + "Transfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n", 400,
      "malformed_http");
}

// Beast ends chunked framing lines only at CRLF and waits past a bare LF:
// such a body used to hang until the silence bound and be closed with no
// answer and no row. The door now answers at once, as for other framing
// errors — in a chunk-size line, in the last chunk's line, in a trailer.
TEST_F(HttpDoorFramingJournalTest, BareLfInChunkedFramingIs400AndJournaledAtOnce) {
  Start();  // header_timeout (the body's silence bound): 300 ms
  const std::string chunked = std::string(kHead) + "Transfer-Encoding: chunked\r\n\r\n";
  for (const std::string& body :
       {std::string("5\nhello\n0\n\n"), std::string("5\r\nhello\r\n0\n\n"),
        std::string("5\r\nhello\r\n0\r\n\n"), std::string("5\r\nhello\r\n0\r\nX-T: v\n\r\n")}) {
    const auto started = SteadyClock::now();
    ExpectJournaledRefusal(chunked + body, 400, "malformed_http");
    EXPECT_LT(SteadyClock::now() - started, 250ms) << "answered only at the silence bound";
  }
  const std::vector<json> rows = JournalRows();
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.back()["error"],
            "malformed HTTP request body: a chunked framing line ends in a bare LF (CRLF "
            "required)");
  // A bare LF inside chunk data is data.
  auto r = Exchange(std::string(kHead) + "Content-Type: application/json\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n4\r\n{\n}\n\r\n0\r\n\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;  // valid framing, but not a valid request
  EXPECT_EQ(r->body.find("malformed HTTP"), std::string::npos) << r->body;
}

// Trailer fields count with the head's against serving.max_headers: past it
// the refusal is the head's 431, not a 400.
TEST_F(HttpDoorFramingJournalTest, TooManyTrailerFieldsAre431AndJournaled) {
  Start();  // max_headers: 20
  std::string trailer;
  for (int i = 0; i < 25; ++i) trailer += "X-T" + std::to_string(i) + ": v\r\n";
  ExpectJournaledRefusal(std::string(kHead) + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n" +
                             trailer + "\r\n",
                         431, "headers_too_large");
  const std::vector<json> rows = JournalRows();
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.back()["error"], "request has more than serving.max_headers (20) header fields");
}

TEST_F(HttpDoorFramingJournalTest, ContentLengthWithTransferEncodingIs400AndJournaled) {
  Start();
  ExpectJournaledRefusal(
      std::string(kHead) + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
      "malformed_http");
  ExpectJournaledRefusal(
      std::string(kHead) + "Transfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\nhello", 400,
      "malformed_http");
}

TEST_F(HttpDoorFramingJournalTest, UnsupportedTransferCodingIs400AndJournaled) {
  Start();
  ExpectJournaledRefusal(std::string(kHead) + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
                         400, "malformed_http");
}

TEST_F(HttpDoorFramingJournalTest, TooManyHeaderFieldsAre431AndJournaled) {
  Start();  // max_headers: 20
  std::string fields;
  for (int i = 0; i < 25; ++i) fields += "X-F" + std::to_string(i) + ": v\r\n";
  ExpectJournaledRefusal(std::string(kHead) + fields + "Content-Length: 2\r\n\r\n{}", 431,
                         "headers_too_large");
}

TEST_F(HttpDoorFramingJournalTest, OneOversizedHeaderBlockIs431AndJournaled) {
  Start();  // max_header_bytes: 8192; Beast stops before it parsed anything
  ExpectJournaledRefusal("POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nX-Big: " +
                             std::string(9000, 'b') + "\r\nContent-Length: 2\r\n\r\n{}",
                         431, "headers_too_large", "chat");
}

TEST_F(HttpDoorFramingJournalTest, EndlessHeadersAre431AndJournaled) {
  Start();
  const size_t before = JournalRows().size();
  auto c = Connect();
  c->Send(kHead);
  std::string lines;
  for (int i = 0; i < 100; ++i) lines += "X-A: b\r\n";
  for (int i = 0; i < 1000 && c->TrySend(lines); ++i) {
  }
  auto r = c->Read(3000ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  EXPECT_TRUE(c->WaitClosed(3000ms));
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), before + 1);
  EXPECT_EQ(rows.back()["status"], 431);
  EXPECT_EQ(rows.back()["terminal"], "invalid");
}

TEST_F(HttpDoorFramingJournalTest, BodyOverTheLimitIs413AndJournaled) {
  Start();  // max_body_bytes: 64 KiB
  ExpectJournaledRefusal(std::string(kHead) + "Content-Length: 70000\r\n\r\n", 413, "too_large");
  std::string chunked = std::string(kHead) + "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 9; ++i) chunked += "2000\r\n" + std::string(8192, 'a') + "\r\n";
  ExpectJournaledRefusal(chunked, 413, "too_large");
}

TEST_F(HttpDoorFramingJournalTest, HeadersThatStopArrivingAre408AndJournaled) {
  Start();  // header_timeout: 300 ms
  const auto started = SteadyClock::now();
  ExpectJournaledRefusal(std::string(kHead) + "Content-Type: application/json\r\n", 408,
                         "header_timeout");
  EXPECT_GE(SteadyClock::now() - started, 250ms);
  // Just the request line.
  ExpectJournaledRefusal("POST /v1/chat/completions HTTP/1.0\r\n", 408, "header_timeout", "chat");
  const std::vector<json> rows = JournalRows();
  ASSERT_FALSE(rows.empty());
  EXPECT_NE(rows.back()["error"].get<std::string>().find("serving.header_timeout_s (0.3 s)"),
            std::string::npos)
      << rows.back().dump();
}

TEST_F(HttpDoorFramingJournalTest, SlowHeadOfAPlainRouteIs408WithoutARow) {
  Start();
  ExpectUnjournaled("GET /health HTTP/1.1\r\nHost: t\r\n", 408);
}

TEST_F(HttpDoorFramingJournalTest, BytesThatNeverMadeARequestLineWriteNoRow) {
  Start();
  // Cut off inside the request line: closed at the header timeout, unanswered.
  ExpectUnjournaled("POST /v1/completions HTT", 0);
  // Malformed request lines are answered 400, but were never requests.
  ExpectUnjournaled("POST /v1/completions HTTP/9.9\r\nHost: t\r\n\r\n", 400);
  ExpectUnjournaled("POST  /v1/completions HTTP/1.1\r\nHost: t\r\n\r\n", 400);
  ExpectUnjournaled("\x01\x02\x03 / HTTP/1.1\r\n\r\n", 400);
}

TEST_F(HttpDoorFramingJournalTest, ParseRequestLineAcceptsOnlyWellFormedLines) {
  HttpRequest out;
  EXPECT_TRUE(ParseRequestLine("POST /v1/completions?x=1 HTTP/1.1\r\nHost", &out));
  EXPECT_EQ(out.method(), boost::beast::http::verb::post);
  EXPECT_EQ(out.target(), "/v1/completions?x=1");
  EXPECT_EQ(out.version(), 11u);
  EXPECT_TRUE(ParseRequestLine("\r\nGET / HTTP/1.0\r\n", &out));
  EXPECT_EQ(out.version(), 10u);
  for (const char* bad :
       {"POST /v1/completions HTTP/1.1", "POST /v1/completions\r\n", "POST  / HTTP/1.1\r\n",
        "PO ST / HTTP/1.1\r\n", "POST / HTTP/2.0\r\n", "POST /a\x7f HTTP/1.1\r\n",
        " / HTTP/1.1\r\n", "POST / HTTP/1.1 \r\n", "(POST) / HTTP/1.1\r\n", ""}) {
    EXPECT_FALSE(ParseRequestLine(bad, &out)) << bad;
  }
}

// A flood of framing refusals writes at most refusal_rows_per_s rows a
// second per reason; the rest are counted into one refusals_suppressed row
// (the journal's clock is a fake one here: the flood is one instant).
TEST_F(HttpDoorFramingJournalTest, FramingRefusalFloodIsRateLimitedWithASummaryRow) {
  journal_options_.clock = &journal_clock_;
  journal_options_.refusal_rows_per_s = 10;
  Start();
  constexpr int kFlood = 25;
  for (int i = 0; i < kFlood; ++i) {
    auto c = Connect();
    c->Send(std::string(kHead) + "Content-Length: 12abc\r\n\r\n{}");
    auto r = c->Read(3000ms);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);  // every client still gets its answer
  }
  EXPECT_EQ(JournalRows().size(), 10u);
  journal_clock_.Advance(1s);
  journal_->Flush();
  std::vector<json> events;
  std::ifstream in(journal_path_);
  for (std::string line; std::getline(in, line);) {
    json row = json::parse(line, nullptr, false);
    if (row.is_object() && row.contains("event")) events.push_back(std::move(row));
  }
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["event"], "refusals_suppressed");
  EXPECT_EQ(events[0]["reason"], "malformed_http");
  EXPECT_EQ(events[0]["count"], kFlood - 10);
}

TEST_F(HttpDoorFramingJournalTest, NormalRequestsStillServedAndJournaledOnce) {
  Start();
  auto r = Exchange(Post("/v1/completions", Completion(false)));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["terminal"], "completed");
}

}  // namespace
}  // namespace narwhal::server::http_door_test
