#include "loadgen/sse_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace edgelm::loadgen {
namespace {

// Feeds `pieces` in order and returns the data of every event.
std::vector<std::string> events_of(SseParser& p, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const auto& piece : pieces) p.feed(piece, [&](const SseEvent& e) { out.push_back(e.data); });
  return out;
}

std::vector<std::string> events_of(const std::vector<std::string>& pieces) {
  SseParser p;
  return events_of(p, pieces);
}

TEST(SseParser, EventsEndAtBlankLines) {
  EXPECT_EQ(events_of({"data: {\"a\":1}\n\ndata: [DONE]\n\n"}),
            (std::vector<std::string>{"{\"a\":1}", "[DONE]"}));
}

TEST(SseParser, AnEventWithoutItsBlankLineIsNotDispatched) {
  SseParser p;
  EXPECT_TRUE(events_of(p, {"data: x\n"}).empty());
  EXPECT_TRUE(p.pending());
  EXPECT_EQ(events_of(p, {"\n"}), std::vector<std::string>{"x"});
  EXPECT_FALSE(p.pending());
}

TEST(SseParser, CommentsAreCountedAndIgnored) {
  SseParser p;
  EXPECT_EQ(events_of(p, {": keep-alive\n\n", ":\n", "data: a\n", ": between lines\n", "\n"}),
            std::vector<std::string>{"a"});
  EXPECT_EQ(p.comments(), 3u);
}

TEST(SseParser, CrLfAndLoneCrEndLines) {
  EXPECT_EQ(events_of({"data: a\r\n\r\ndata: b\r\rdata: c\n\n"}),
            (std::vector<std::string>{"a", "b", "c"}));
}

TEST(SseParser, CrLfSplitAcrossPieces) {
  // The CR ends one piece, its LF starts the next: one line end, not two.
  EXPECT_EQ(events_of({"data: a\r", "\ndata: b\r", "\n\r", "\n"}),
            std::vector<std::string>{"a\nb"});
}

TEST(SseParser, MultiLineDataAndFields) {
  SseParser p;
  std::vector<SseEvent> got;
  p.feed("event: update\nid: 7\ndata: one\ndata:two\ndata\nretry: 100\nunknown: x\n\n",
         [&](const SseEvent& e) { got.push_back(e); });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].event, "update");
  EXPECT_EQ(got[0].id, "7");
  EXPECT_EQ(got[0].data, "one\ntwo\n");  // "data" without a colon adds an empty line
}

TEST(SseParser, OnlyOneLeadingSpaceIsStripped) {
  EXPECT_EQ(events_of({"data:  two spaces\n\n"}), std::vector<std::string>{" two spaces"});
}

TEST(SseParser, EventsWithoutDataAreNotDispatched) {
  EXPECT_TRUE(events_of({"event: ping\n\n", "id: 3\n\n"}).empty());
}

TEST(SseParser, LeadingBomIsSkippedEvenWhenSplit) {
  EXPECT_EQ(events_of({"\xEF", "\xBB",
                       "\xBF"
                       "data: a\n\n"}),
            std::vector<std::string>{"a"});
  EXPECT_EQ(events_of({"\xEF\xBB\xBF"
                       "data: a\n\n"}),
            std::vector<std::string>{"a"});
  // Not a BOM: the bytes are kept (here they make an unknown field).
  EXPECT_EQ(events_of({"\xEF", "data: a\n\ndata: b\n\n"}), std::vector<std::string>{"b"});
}

TEST(SseParser, EverySplitGivesTheSameEvents) {
  const std::string stream =
      ": hello\r\n\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n"
      "data: {\"choices\":[{\"text\":\"b\"}]}\n\n: keep-alive\n\n"
      "data: line1\rdata: line2\r\r"
      "data: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"choices\":[{\"text\":\"a\"}]}",
                                         "{\"choices\":[{\"text\":\"b\"}]}", "line1\nline2",
                                         "[DONE]"};
  ASSERT_EQ(events_of({stream}), want);
  // Every two-piece split, then byte by byte, then random pieces.
  for (size_t i = 0; i <= stream.size(); ++i)
    ASSERT_EQ(events_of({stream.substr(0, i), stream.substr(i)}), want) << "split at " << i;
  std::vector<std::string> bytes;
  for (char c : stream) bytes.emplace_back(1, c);
  EXPECT_EQ(events_of(bytes), want);
  std::mt19937 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> pieces;
    for (size_t at = 0; at < stream.size();) {
      const size_t n = 1 + rng() % 9;
      pieces.push_back(stream.substr(at, n));
      at += n;
    }
    ASSERT_EQ(events_of(pieces), want) << "trial " << trial;
  }
}

TEST(SseParser, OverlongLineBreaksTheStream) {
  SseParser p(16);
  int n = 0;
  EXPECT_TRUE(p.feed("data: short\n\n", [&](const SseEvent&) { ++n; }));
  EXPECT_FALSE(p.feed("data: 0123456789abcdef", [&](const SseEvent&) { ++n; }));
  EXPECT_TRUE(p.broken());
  EXPECT_FALSE(p.feed("\n\n", [&](const SseEvent&) { ++n; }));
  EXPECT_EQ(n, 1);
}

}  // namespace
}  // namespace edgelm::loadgen
