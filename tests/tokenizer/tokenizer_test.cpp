// Self-contained tokenizer tests on tiny hand-made vocabularies (no assets
// needed). Every expected id sequence below is worked out by hand in the
// comment beside it.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <thread>

#include "tiny_vocab.h"
#include "tokenizer/utf8_stream.h"

namespace edgelm::tokenizer {
namespace {

using test::BpeVocab;
using test::kSp;
using test::SpmVocab;
using Ids = std::vector<int32_t>;

Tokenizer must_build(const gguf::Writer& w) {
  auto t = test::build(w);
  EXPECT_TRUE(t.ok()) << t.message();
  return std::move(t).value();
}

int32_t spm_byte(uint8_t b) { return 3 + b; }  // <0x00> is id 3

// ---------------------------------------------------------------- SPM ----

TEST(SpmTokenizer, MergesByScore) {
  const SpmVocab v = test::spm_tokens();
  Tokenizer t = must_build(test::spm_writer(v));
  EXPECT_EQ(t.kind(), VocabKind::kSpm);
  EXPECT_TRUE(t.add_space_prefix());
  // "▁hello": ll(-1), he(-2), then llo(-3), hello(-4), ▁hello(-5).
  // "▁world": ▁w(-6), or(-7), ▁wor(-8), ld(-9), ▁world(-9.5).
  EXPECT_EQ(t.encode("hello world", false, false), (Ids{v.id(kSp + "hello"), v.id(kSp + "world")}));
  // Equal scores: the leftmost pair first, "▁aaa" -> ▁ aa a.
  EXPECT_EQ(t.encode("aaa", false, false), (Ids{v.id(kSp), v.id("aa"), v.id("a")}));
  // Two spaces inside the text: "▁hello▁▁world"; ▁▁ (-3) beats ▁w (-6).
  EXPECT_EQ(t.encode("hello  world", false, false),
            (Ids{v.id(kSp + "hello"), v.id(kSp + kSp), v.id("w"), v.id("or"), v.id("ld")}));
  EXPECT_EQ(t.encode("", false, false), Ids{});
}

TEST(SpmTokenizer, BosEosFollowMetadata) {
  const SpmVocab v = test::spm_tokens();
  Tokenizer t = must_build(test::spm_writer(v));
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_EQ(t.unk(), 0);
  EXPECT_EQ(t.encode("hello", true, false), (Ids{1, v.id(kSp + "hello")}));
  EXPECT_EQ(t.encode("", true, false), (Ids{1}));

  gguf::Writer w = test::spm_writer(v);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_bool("tokenizer.ggml.add_eos_token", true);
  Tokenizer t2 = must_build(w);
  EXPECT_EQ(t2.encode("hello", true, false), (Ids{v.id(kSp + "hello"), 2}));
  EXPECT_EQ(t2.encode("hello", false, false), (Ids{v.id(kSp + "hello")}));
}

TEST(SpmTokenizer, ByteFallback) {
  const SpmVocab v = test::spm_tokens();
  Tokenizer t = must_build(test::spm_writer(v));
  // "é" (C3 A9) and the emoji (F0 9F 98 80) have no token: one byte token each byte.
  EXPECT_EQ(t.encode("h\xC3\xA9", false, false), (Ids{v.id(kSp), v.id("h"), spm_byte(0xC3), spm_byte(0xA9)}));
  EXPECT_EQ(t.encode("\xF0\x9F\x98\x80", false, false),
            (Ids{v.id(kSp), spm_byte(0xF0), spm_byte(0x9F), spm_byte(0x98), spm_byte(0x80)}));
  // Malformed UTF-8 survives byte for byte.
  EXPECT_EQ(t.encode("\xFF", false, false), (Ids{v.id(kSp), spm_byte(0xFF)}));
  EXPECT_EQ(t.decode(t.encode("h\xC3\xA9 \xFF\xF0\x9F", true, false)), "h\xC3\xA9 \xFF\xF0\x9F");
  EXPECT_EQ(t.token_piece(spm_byte(0x41)), "A");
}

TEST(SpmTokenizer, UnknownWithoutByteTokens) {
  const SpmVocab v = test::spm_tokens(/*with_bytes=*/false);
  Tokenizer t = must_build(test::spm_writer(v));
  // No <0xXX> tokens: an unknown character is one <unk>.
  EXPECT_EQ(t.encode("h\xC3\xA9h", false, false), (Ids{v.id(kSp), v.id("h"), 0, v.id("h")}));
}

TEST(SpmTokenizer, SpecialTokens) {
  const SpmVocab v = test::spm_tokens();
  Tokenizer t = must_build(test::spm_writer(v));
  const int32_t start = v.id("<|im_start|>"), end = v.id("<|im_end|>");
  // parse_special: the markers are tokens, and the text after a special token
  // gets the space prefix again (llama.cpp's SPM behaviour).
  EXPECT_EQ(t.encode("<|im_start|>hello<|im_end|>", false, true), (Ids{start, v.id(kSp + "hello"), end}));
  EXPECT_EQ(t.encode("<|im_start|>hello<|im_end|>", true, true), (Ids{1, start, v.id(kSp + "hello"), end}));
  // Without parse_special the marker is plain text (byte tokens here).
  const Ids plain = t.encode("<|im_start|>hello", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), start), 0);
  EXPECT_EQ(plain[1], spm_byte('<'));
  EXPECT_EQ(t.decode(plain), "<|im_start|>hello");
  // USER_DEFINED tokens are matched either way; "b" has no token -> byte.
  const Ids expect_tool{v.id(kSp), v.id("a"), v.id("<tool>"), v.id(kSp), spm_byte('b')};
  EXPECT_EQ(t.encode("a<tool>b", false, false), expect_tool);
  EXPECT_EQ(t.encode("a<tool>b", false, true), expect_tool);
  // Longest match: "<|im_start|>" is not cut as a shorter token.
  EXPECT_EQ(t.encode("<|im_start|><|im_start|>", false, true), (Ids{start, start}));
}

TEST(SpmTokenizer, PiecesAndDecode) {
  const SpmVocab v = test::spm_tokens();
  Tokenizer t = must_build(test::spm_writer(v));
  EXPECT_EQ(t.token_piece(v.id(kSp + "hello")), " hello");
  EXPECT_EQ(t.token_piece(1), "");            // control: nothing unless asked
  EXPECT_EQ(t.token_piece(1, true), "<s>");
  EXPECT_EQ(t.token_piece(0), "");            // unknown: likewise
  EXPECT_EQ(t.token_piece(v.id("<tool>")), "<tool>");
  EXPECT_EQ(t.token_piece(-1), "");
  EXPECT_EQ(t.token_piece(t.n_vocab()), "");

  const Ids ids = t.encode("hello world", true, false);
  EXPECT_EQ(t.decode(ids), "hello world");                // BOS skipped, prefix space removed
  EXPECT_EQ(t.decode(ids, /*skip_special=*/false), "<s> hello world");
  EXPECT_EQ(t.decode(Ids{v.id(kSp + "world")}), "world");
  EXPECT_EQ(t.decode(Ids{-5, 1 << 30, v.id("he")}), "he");  // bad ids are skipped
  for (const char* s : {"hello world", "  leading spaces", "trailing ", "\n\tx y\n", ""}) {
    EXPECT_EQ(t.decode(t.encode(s, true, false)), s) << s;
    EXPECT_EQ(t.decode(t.encode(s, false, false)), s) << s;
  }
  // Like llama.cpp, encode puts a space prefix after a special token too, and
  // only the very first one is removed by decode.
  EXPECT_EQ(t.decode(t.encode("a<tool>b", false, false)), "a<tool> b");
}

TEST(SpmTokenizer, Accessors) {
  const SpmVocab v = test::spm_tokens();
  Tokenizer t = must_build(test::spm_writer(v));
  EXPECT_EQ(t.n_vocab(), static_cast<int32_t>(v.tokens.size()));
  EXPECT_EQ(t.find(kSp + "hello"), v.id(kSp + "hello"));
  EXPECT_EQ(t.find("nope"), std::nullopt);
  EXPECT_EQ(t.text(1), "<s>");
  EXPECT_EQ(t.text(-1), "");
  EXPECT_EQ(t.type(1), TokenType::kControl);
  EXPECT_EQ(t.type(spm_byte(0)), TokenType::kByte);
  EXPECT_EQ(t.type(99999), TokenType::kUndefined);
  EXPECT_FLOAT_EQ(t.score(v.id("ll")), -1.0f);
  // EOS, and </s> / <|im_end|> by their text, end the generation.
  EXPECT_TRUE(t.is_eog(2));
  EXPECT_TRUE(t.is_eog(v.id("<|im_end|>")));
  EXPECT_FALSE(t.is_eog(v.id("<|im_start|>")));
  EXPECT_FALSE(t.is_eog(-1));
  EXPECT_EQ(t.eot(), v.id("<|im_end|>"));
  EXPECT_EQ(t.eog_ids(), (Ids{2, v.id("<|im_end|>")}));
}

// ---------------------------------------------------------------- BPE ----

TEST(BpeTokenizer, MergesByRank) {
  const BpeVocab v = test::bpe_tokens();
  Tokenizer t = must_build(test::bpe_writer(v));
  EXPECT_EQ(t.kind(), VocabKind::kBpe);
  EXPECT_EQ(t.pre_name(), "gpt-2");
  EXPECT_FALSE(t.add_space_prefix());
  const std::string G(byte_to_unicode(' '));
  // Words "hello" and " world": h+e, l+l, he+ll, hell+o; Ġ+w, o+r, Ġw+or, l+d, Ġwor+ld.
  EXPECT_EQ(t.encode("hello world", false, false), (Ids{v.id("hello"), v.id(G + "world")}));
  // "b c" (rank 9) outranks "a b" (rank 10).
  EXPECT_EQ(t.encode("abc", false, false), (Ids{v.id("a"), v.id("bc")}));
  // Same rule twice: leftmost first, x x x x -> xx xx; and xx+x for three.
  EXPECT_EQ(t.encode("xxxx", false, false), (Ids{v.id("xx"), v.id("xx")}));
  EXPECT_EQ(t.encode("xxx", false, false), (Ids{v.id("xxx")}));
  // Merges never cross words: " hello" is Ġ + hello (no "Ġ h" rule).
  EXPECT_EQ(t.encode(" hello", false, false), (Ids{v.byte(' '), v.id("hello")}));
  EXPECT_EQ(t.encode("", false, false), Ids{});
}

TEST(BpeTokenizer, BytesAndInvalidUtf8) {
  const BpeVocab v = test::bpe_tokens();
  Tokenizer t = must_build(test::bpe_writer(v));
  EXPECT_EQ(t.encode("\xC3\xA9", false, false), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(t.encode("\xF0\x9F\x98\x80", false, false), (Ids{0xF0, 0x9F, 0x98, 0x80}));
  // Malformed UTF-8 becomes U+FFFD (EF BF BD) before the split, as in llama.cpp.
  EXPECT_EQ(t.encode("\xFF", false, false), (Ids{0xEF, 0xBF, 0xBD}));
  EXPECT_EQ(t.decode(t.encode("a\xFF", false, false)), "a\xEF\xBF\xBD");
  EXPECT_EQ(t.token_piece(v.id(std::string(byte_to_unicode(' ')) + "world")), " world");
  EXPECT_EQ(t.token_piece(0x0A), "\n");
}

TEST(BpeTokenizer, SpecialTokensAndEog) {
  const BpeVocab v = test::bpe_tokens();
  Tokenizer t = must_build(test::bpe_writer(v));
  const int32_t start = v.id("<|im_start|>"), end = v.id("<|im_end|>"), eot = v.id("<|endoftext|>");
  // "user" has no merges (4 bytes), "\n" is its own word, "hi" is h + i.
  EXPECT_EQ(t.encode("<|im_start|>user\nhi<|im_end|>", false, true),
            (Ids{start, 'u', 's', 'e', 'r', '\n', 'h', 'i', end}));
  const Ids plain = t.encode("<|im_start|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), start), 0);
  EXPECT_EQ(t.decode(plain), "<|im_start|>");
  EXPECT_EQ(t.encode("a<tool>b", false, false), (Ids{'a', v.id("<tool>"), 'b'}));
  // gpt-2 has no BOS by default.
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.encode("hello", true, false), (Ids{v.id("hello")}));
  EXPECT_TRUE(t.is_eog(eot));
  EXPECT_TRUE(t.is_eog(end));
  EXPECT_FALSE(t.is_eog(start));
  EXPECT_EQ(t.decode(Ids{start, 'h', 'i', end}), "hi");
  EXPECT_EQ(t.decode(Ids{start, 'h', 'i', end}, false), "<|im_start|>hi<|im_end|>");
}

TEST(BpeTokenizer, CharacterWithoutTokenIsDropped) {
  // As llama.cpp: a byte with no token of its own is dropped, not <unk>.
  BpeVocab v = test::bpe_tokens();
  v.tokens[0x01] = "not-a-byte";
  gguf::Writer w = test::bpe_writer(v);
  w.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.id("<|endoftext|>")));
  Tokenizer t = must_build(w);
  EXPECT_EQ(t.encode("\x01" "a", false, false), (Ids{'a'}));
}

TEST(BpeTokenizer, Llama3StyleAddsBos) {
  const BpeVocab v = test::bpe_tokens();
  gguf::Writer w = test::bpe_writer(v);
  w.set_string("tokenizer.ggml.pre", "llama-bpe");
  Tokenizer t = must_build(w);
  EXPECT_TRUE(t.add_bos());  // llama-bpe's default, no add_bos_token key
  EXPECT_EQ(t.encode("hello", true, false), (Ids{v.id("<|endoftext|>"), v.id("hello")}));
}

TEST(BpeTokenizer, SharedAcrossThreads) {
  const BpeVocab v = test::bpe_tokens();
  const Tokenizer t = must_build(test::bpe_writer(v));
  const std::string text = "hello world <|im_end|> abc xxxx \xC3\xA9\xF0\x9F\x98\x80";
  const Ids want = t.encode(text, true, true);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      const Tokenizer copy = t;  // copies share the tables
      for (int i = 0; i < 200; ++i)
        if (copy.encode(text, true, true) != want || copy.decode(want) != t.decode(want)) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(BpeTokenizer, EndOfGenerationByText) {
  // gpt-oss style: with <|return|> and <|call|> present, <|end|> only closes a
  // message (rendered, not end-of-generation); <|channel|> is always rendered.
  BpeVocab v = test::bpe_tokens();
  for (const char* s : {"<|end|>", "<|return|>", "<|call|>", "<|channel|>", "<|eot_id|>"}) {
    v.tokens.push_back(s);
    v.types.push_back(static_cast<int32_t>(TokenType::kNormal));  // not even CONTROL in the file
  }
  Tokenizer t = must_build(test::bpe_writer(v));
  EXPECT_FALSE(t.is_eog(v.id("<|end|>")));
  EXPECT_EQ(t.token_piece(v.id("<|end|>")), "<|end|>");
  EXPECT_TRUE(t.is_eog(v.id("<|return|>")));
  EXPECT_TRUE(t.is_eog(v.id("<|call|>")));
  EXPECT_EQ(t.type(v.id("<|return|>")), TokenType::kControl);
  EXPECT_EQ(t.token_piece(v.id("<|return|>")), "");
  EXPECT_EQ(t.token_piece(v.id("<|channel|>")), "<|channel|>");
  EXPECT_EQ(t.eot(), v.id("<|eot_id|>"));  // preferred over <|im_end|>
}

// -------------------------------------------------------- streaming ----

TEST(Utf8Stream, EmojiSplitAcrossByteTokens) {
  const BpeVocab v = test::bpe_tokens();
  Tokenizer t = must_build(test::bpe_writer(v));
  const Ids ids = t.encode("a\xF0\x9F\x98\x80!", false, false);
  ASSERT_EQ(ids.size(), 6u);
  Utf8Stream s;
  std::vector<std::string> outs;
  for (int32_t id : ids) outs.push_back(s.push(t.token_piece_view(id)));
  EXPECT_EQ(outs, (std::vector<std::string>{"a", "", "", "", "\xF0\x9F\x98\x80", "!"}));
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8Stream, SpmByteFallbackStreams) {
  const SpmVocab v = test::spm_tokens();
  Tokenizer t = must_build(test::spm_writer(v));
  const Ids ids = t.encode("\xE2\x82\xAC", false, false);  // "€" -> ▁ + 3 byte tokens
  Utf8Stream s;
  std::string out;
  for (int32_t id : ids) {
    const size_t before = out.size();
    s.push(t.token_piece_view(id), out);
    if (out.size() == before) {
      EXPECT_GT(s.pending(), 0u);
    }
  }
  EXPECT_EQ(out, " \xE2\x82\xAC");
}

TEST(Utf8Stream, InvalidBytesBecomeReplacementChars) {
  Utf8Stream s;
  EXPECT_EQ(s.push("a\xFF"), "a\xEF\xBF\xBD");
  EXPECT_EQ(s.push("\xE2\x82"), "");  // could still become "€"
  EXPECT_EQ(s.push("x"), "\xEF\xBF\xBD\xEF\xBF\xBDx");  // it did not: one U+FFFD per byte
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.pending(), 2u);
  EXPECT_EQ(s.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");  // unfinished at the end
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.push("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate is malformed
  EXPECT_EQ(s.push("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // an overlong form too
}

// Any way of cutting any bytes gives the same text as sanitising them whole.
TEST(Utf8Stream, SplitInvariant) {
  uint32_t x = 7;
  auto next = [&] {
    x = x * 1664525u + 1013904223u;
    return x >> 8;
  };
  const std::string alphabet[] = {"a", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xFF", "\x80", "\xE2\x82",
                                  "\xF0\x9F", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xC0\xAF"};
  for (int round = 0; round < 500; ++round) {
    std::string bytes;
    for (int k = next() % 12; k > 0; --k) bytes += alphabet[next() % std::size(alphabet)];
    std::string whole;
    utf8_sanitize_append(whole, bytes);
    ASSERT_TRUE(utf8_is_valid(whole));
    Utf8Stream s;
    std::string out;
    for (size_t i = 0; i < bytes.size();) {
      const size_t n = std::min<size_t>(bytes.size() - i, next() % 4);
      s.push(std::string_view(bytes).substr(i, n), out);
      i += n;
    }
    s.flush(out);
    ASSERT_EQ(out, whole) << "round " << round;
  }
}

// ------------------------------------------------------ bad metadata ----

void expect_error(const gguf::Writer& w, const std::string& needle) {
  auto t = test::build(w);
  ASSERT_FALSE(t.ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_NE(t.message().find(needle), std::string::npos) << t.message();
}

TEST(TokenizerMetadata, MalformedSpmIsAClearError) {
  const SpmVocab v = test::spm_tokens();
  const size_t n = v.tokens.size();
  {
    gguf::Writer w = test::spm_writer(v);
    w.remove("tokenizer.ggml.model");
    expect_error(w, "tokenizer.ggml.model");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_string("tokenizer.ggml.model", "bert");
    expect_error(w, "'bert'");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_u32("tokenizer.ggml.model", 3);
    expect_error(w, "tokenizer.ggml.model");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.remove("tokenizer.ggml.tokens");
    expect_error(w, "missing tokenizer.ggml.tokens");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_i32s("tokenizer.ggml.tokens", {1, 2, 3});
    expect_error(w, "tokenizer.ggml.tokens must be an array of strings");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_strings("tokenizer.ggml.tokens", {});
    expect_error(w, "tokenizer.ggml.tokens is empty");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_f32s("tokenizer.ggml.scores", std::vector<float>(n - 1, 0.0f));
    expect_error(w, "tokenizer.ggml.scores has");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_strings("tokenizer.ggml.scores", std::vector<std::string>(n, "x"));
    expect_error(w, "tokenizer.ggml.scores must be an array of numbers");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_i32s("tokenizer.ggml.token_type", std::vector<int32_t>(n + 3, 1));
    expect_error(w, "tokenizer.ggml.token_type has");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_f32s("tokenizer.ggml.token_type", std::vector<float>(n, 1.0f));
    expect_error(w, "tokenizer.ggml.token_type must be an array of integers");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    std::vector<int32_t> types(n, 1);
    types[7] = 42;
    w.set_i32s("tokenizer.ggml.token_type", types);
    expect_error(w, "tokenizer.ggml.token_type[7] = 42");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(n));
    expect_error(w, "tokenizer.ggml.bos_token_id");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_string("tokenizer.ggml.eos_token_id", "2");
    expect_error(w, "tokenizer.ggml.eos_token_id");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_i32("tokenizer.ggml.unknown_token_id", -7);
    expect_error(w, "tokenizer.ggml.unknown_token_id");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_u32("tokenizer.ggml.add_bos_token", 1);
    expect_error(w, "tokenizer.ggml.add_bos_token");
  }
  {
    gguf::Writer w = test::spm_writer(v);
    w.set_u32("tokenizer.chat_template", 1);
    expect_error(w, "tokenizer.chat_template");
  }
}

TEST(TokenizerMetadata, MalformedBpeIsAClearError) {
  const BpeVocab v = test::bpe_tokens();
  {
    gguf::Writer w = test::bpe_writer(v);
    w.remove("tokenizer.ggml.merges");
    expect_error(w, "missing tokenizer.ggml.merges");
  }
  {
    gguf::Writer w = test::bpe_writer(v);
    w.set_i32s("tokenizer.ggml.merges", {1});
    expect_error(w, "tokenizer.ggml.merges must be an array of strings");
  }
  {
    gguf::Writer w = test::bpe_writer(v);
    w.set_strings("tokenizer.ggml.merges", {"h e", "nospace"});
    expect_error(w, "tokenizer.ggml.merges[1]");
  }
  {
    gguf::Writer w = test::bpe_writer(v);
    w.set_string("tokenizer.ggml.pre", "no-such-pre");
    expect_error(w, "'no-such-pre'");
  }
}

TEST(TokenizerMetadata, OddButValidDataDoesNotBreak) {
  // Merge rules over texts that are not tokens are skipped; duplicate and
  // empty token texts are tolerated; -1 means "no such token".
  BpeVocab v = test::bpe_tokens();
  v.merges.push_back("zz qq");
  v.tokens.push_back("");
  v.types.push_back(static_cast<int32_t>(TokenType::kControl));
  v.tokens.push_back("hello");  // a duplicate: the later id wins lookups
  v.types.push_back(static_cast<int32_t>(TokenType::kNormal));
  gguf::Writer w = test::bpe_writer(v);
  w.set_i32("tokenizer.ggml.padding_token_id", -1);
  Tokenizer t = must_build(w);
  EXPECT_EQ(t.pad(), kNoToken);
  EXPECT_EQ(t.find("hello"), static_cast<int32_t>(v.tokens.size()) - 1);
  EXPECT_EQ(t.decode(t.encode("hello <|im_end|> zzqq", false, true)), "hello  zzqq");
  EXPECT_EQ(t.token_piece(static_cast<int32_t>(v.tokens.size()) - 2, true), "");
}

}  // namespace
}  // namespace edgelm::tokenizer
