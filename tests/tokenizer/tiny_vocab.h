// Tiny hand-made vocabularies for the self-contained tokenizer tests: small
// enough to work every expected tokenization out by hand.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace edgelm::tokenizer::test {

inline const std::string kSp = "\xE2\x96\x81";  // U+2581

struct TinyToken {
  std::string text;
  float score = 0.0f;
  TokenType type = TokenType::kNormal;
};

// SentencePiece-style vocab. Ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>,
// then the pieces below in order (see the named constants).
struct SpmVocab {
  std::vector<TinyToken> tokens;
  int32_t id(const std::string& text) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i].text == text) return static_cast<int32_t>(i);
    ADD_FAILURE() << "no token '" << text << "' in the tiny vocab";
    return -1;
  }
};

inline SpmVocab spm_tokens(bool with_bytes = true) {
  SpmVocab v;
  v.tokens.push_back({"<unk>", 0, TokenType::kUnknown});
  v.tokens.push_back({"<s>", 0, TokenType::kControl});
  v.tokens.push_back({"</s>", 0, TokenType::kControl});
  if (with_bytes) {
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b)
      v.tokens.push_back({std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", 0, TokenType::kByte});
  }
  // Scores decide the merge order: ll (-1) before he (-2) before llo (-3)
  // before hello (-4) before ▁hello (-5).
  for (const auto& [t, s] : std::vector<std::pair<std::string, float>>{
           {kSp, -10}, {"h", -20}, {"e", -20}, {"l", -20}, {"o", -20}, {"w", -20}, {"r", -20}, {"d", -20},
           {"a", -20}, {"ll", -1}, {"he", -2}, {"llo", -3}, {"hello", -4}, {kSp + "hello", -5},
           {kSp + "w", -6}, {"or", -7}, {kSp + "wor", -8}, {"ld", -9}, {kSp + "world", -9.5f}, {"aa", -1},
           {kSp + kSp, -3}})
    v.tokens.push_back({t, s, TokenType::kNormal});
  v.tokens.push_back({"<|im_start|>", 0, TokenType::kControl});
  v.tokens.push_back({"<|im_end|>", 0, TokenType::kControl});
  v.tokens.push_back({"<tool>", 0, TokenType::kUserDefined});
  return v;
}

inline gguf::Writer spm_writer(const SpmVocab& v) {
  gguf::Writer w;
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const auto& t : v.tokens) {
    texts.push_back(t.text);
    scores.push_back(t.score);
    types.push_back(static_cast<int32_t>(t.type));
  }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", texts);
  w.set_f32s("tokenizer.ggml.scores", scores);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
  return w;
}

// Byte-level BPE vocab ("gpt2", pre "gpt-2"). Ids 0..255: the 256 one-byte
// tokens in byte order; then the merge results; then special tokens.
struct BpeVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  int32_t id(const std::string& text) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == text) return static_cast<int32_t>(i);
    ADD_FAILURE() << "no token '" << text << "' in the tiny vocab";
    return -1;
  }
  int32_t byte(uint8_t b) const { return b; }
};

inline BpeVocab bpe_tokens() {
  BpeVocab v;
  for (int b = 0; b < 256; ++b) {
    v.tokens.emplace_back(byte_to_unicode(static_cast<uint8_t>(b)));
    v.types.push_back(static_cast<int32_t>(TokenType::kNormal));
  }
  const std::string G = std::string(byte_to_unicode(' '));  // "Ġ"
  // Rank order = list order. "b c" outranks "a b": "abc" -> a + bc.
  for (const auto& m : std::vector<std::pair<std::string, std::string>>{{"h", "e"},
                                                                         {"l", "l"},
                                                                         {"he", "ll"},
                                                                         {"hell", "o"},
                                                                         {G, "w"},
                                                                         {"o", "r"},
                                                                         {G + "w", "or"},
                                                                         {"l", "d"},
                                                                         {G + "wor", "ld"},
                                                                         {"b", "c"},
                                                                         {"a", "b"},
                                                                         {"x", "x"},
                                                                         {"xx", "x"}}) {
    v.merges.push_back(m.first + " " + m.second);
    const std::string joined = m.first + m.second;
    bool have = false;
    for (const auto& t : v.tokens) have |= t == joined;
    if (!have) {
      v.tokens.push_back(joined);
      v.types.push_back(static_cast<int32_t>(TokenType::kNormal));
    }
  }
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.push_back(s);
    v.types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  v.tokens.push_back("<tool>");
  v.types.push_back(static_cast<int32_t>(TokenType::kUserDefined));
  return v;
}

inline gguf::Writer bpe_writer(const BpeVocab& v) {
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt-2");
  w.set_strings("tokenizer.ggml.tokens", v.tokens);
  w.set_i32s("tokenizer.ggml.token_type", v.types);
  w.set_strings("tokenizer.ggml.merges", v.merges);
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.id("<|endoftext|>")));
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.id("<|endoftext|>")));
  return w;
}

// Parses the writer's bytes and builds a Tokenizer (the bytes must outlive
// only the parse: a Tokenizer owns its tables).
inline Result<Tokenizer> build(const gguf::Writer& w) {
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = gguf::File::parse(MappedFile::view(bytes.data(), bytes.size()));
  if (!f.ok()) return f.error();
  return Tokenizer::from_gguf(*f);
}

}  // namespace edgelm::tokenizer::test
