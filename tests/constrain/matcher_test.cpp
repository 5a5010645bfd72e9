// The byte matcher on hand-built schemas (the JSON Schema compiler's own
// tests, with the python oracle, are in tests/serve/json_schema_test.cpp).
#include "constrain/matcher.h"

#include <gtest/gtest.h>

#include <string>

#include "constrain/schema.h"

namespace edgelm::constrain {
namespace {

bool takes(const Schema& s, std::string_view text, bool* complete = nullptr) {
  Matcher m(s);
  const bool ok = m.feed(text);
  if (complete) *complete = ok && m.complete();
  return ok;
}

Schema one(Node n) {
  Schema s;
  s.root = s.add(std::move(n));
  EXPECT_TRUE(s.finish().ok());
  return s;
}

TEST(Matcher, NumbersWithinBounds) {
  Node n;
  n.kind = Kind::Number;
  n.has_lo = n.has_hi = true;
  n.lo = -1.5;
  n.hi = 2;
  n.hi_excl = true;
  const Schema s = one(n);
  bool done = false;
  EXPECT_TRUE(takes(s, "-1.5", &done) && done);
  EXPECT_TRUE(takes(s, "1.999", &done) && done);
  EXPECT_TRUE(takes(s, "0", &done) && done);
  EXPECT_FALSE(takes(s, "2"));    // no completion of "2" is below 2
  EXPECT_FALSE(takes(s, "-2"));   // nor of "-2" at least -1.5
  EXPECT_FALSE(takes(s, "1e5"));  // no exponents
  EXPECT_EQ(number_completion(s.nodes[0], ""), 1);
  EXPECT_EQ(number_completion(s.nodes[0], "-1."), 1);
}

TEST(Matcher, IntegerBoundsNeedDigits) {
  Node n;
  n.kind = Kind::Integer;
  n.has_lo = true;
  n.lo = 1000;
  const Schema s = one(n);
  EXPECT_EQ(s.nodes[0].min_bytes, 4);
  Matcher m(s);
  EXPECT_TRUE(m.feed(std::string_view("1")));
  EXPECT_EQ(m.min_close(), 3);
  EXPECT_FALSE(m.complete());
}

TEST(Matcher, PatternChain) {
  Schema s;
  Pattern p;
  ByteSet upper, digit;
  upper.add_range('A', 'Z');
  digit.add_range('0', '9');
  p.steps = {{upper, Rep::One}, {upper, Rep::Optional}, {digit, Rep::Star}};
  s.patterns.push_back(p);
  Node n;
  n.kind = Kind::String;
  n.pattern = 0;
  n.max_len = 4;
  s.root = s.add(n);
  ASSERT_TRUE(s.finish().ok());
  bool done = false;
  EXPECT_TRUE(takes(s, "\"AB12\"", &done) && done);
  EXPECT_TRUE(takes(s, "\"A\"", &done) && done);
  EXPECT_FALSE(takes(s, "\"\""));
  EXPECT_TRUE(takes(s, "\"A123"));
  EXPECT_FALSE(takes(s, "\"A1234"));  // past maxLength 4
  EXPECT_FALSE(takes(s, "\"1"));
}

TEST(Matcher, StringsAreValidUtf8) {
  Node n;
  n.kind = Kind::String;
  const Schema s = one(n);
  bool done = false;
  EXPECT_TRUE(takes(s, "\"caf\xc3\xa9 \\n\"", &done) && done);
  EXPECT_FALSE(takes(s, "\"\xc3\""));        // a cut character
  EXPECT_FALSE(takes(s, "\"\xed\xa0\x80"));  // a surrogate
  EXPECT_FALSE(takes(s, "\"\xc0\xaf"));      // overlong
  EXPECT_FALSE(takes(s, "\"a\nb"));          // raw control character
  EXPECT_FALSE(takes(s, "\"\\u0041"));       // \u escapes are not generated
}

TEST(Matcher, LiteralsThatExtendEachOther) {
  Node n;
  n.kind = Kind::Literal;
  n.literals = {"1", "12", "true"};
  Schema s;
  Node arr;
  arr.kind = Kind::Array;
  const int lit = s.add(n);
  arr.items = lit;
  s.root = s.add(arr);
  ASSERT_TRUE(s.finish().ok());
  bool done = false;
  EXPECT_TRUE(takes(s, "[1,12, true]", &done) && done);
  EXPECT_FALSE(takes(s, "[13"));
  EXPECT_FALSE(takes(s, "[tru]"));
}

// A schema whose shortest value is too long to count (a billion items) is
// refused, and the message does not claim it allows no value at all.
TEST(Matcher, AValueTooLongToCountIsRefusedAsSuch) {
  Node item;
  item.kind = Kind::Literal;
  item.literals = {"1"};
  Schema s;
  Node arr;
  arr.kind = Kind::Array;
  arr.items = s.add(item);
  arr.min_items = 1000000000;
  s.root = s.add(arr);
  const Status st = s.finish();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no value shorter than"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("minItems"), std::string::npos) << st.message();
}

TEST(Matcher, CopyTakesTheLiveFrames) {
  Node n;
  n.kind = Kind::Array;
  Schema s;
  const int any = s.any();
  n.items = any;
  s.root = s.add(n);
  ASSERT_TRUE(s.finish().ok());
  Matcher a(s), b(s);
  ASSERT_TRUE(a.feed(std::string_view("[[{\"k\": [")));
  b.copy_from(a);
  EXPECT_EQ(b.depth(), a.depth());
  EXPECT_EQ(b.min_close(), a.min_close());
  EXPECT_TRUE(b.feed(std::string_view("]}]]")));
  EXPECT_TRUE(b.done());
}

}  // namespace
}  // namespace edgelm::constrain
