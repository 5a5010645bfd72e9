// libFuzzer target: tokenizes arbitrary bytes with small built-in vocabs
// (SentencePiece-style, and byte-level BPE under several pre-tokenizers),
// decodes them again and streams the pieces, checking:
//   - every id is inside the vocab;
//   - Utf8Stream over the pieces gives exactly the sanitised decode;
//   - byte-level BPE is lossless: decode(encode(x)) == sanitise(x);
//   - SPM is lossless when no special token or U+2581 is involved.
// The vocabs are made with gguf::Writer, so the target needs no files.
//
// Input: byte 0 picks the vocab and the flags, the rest is the text. With
// the top bit of byte 0 set, the vocab itself comes from the input (one token
// per line, types and merges derived from the bytes), which exercises the
// loader on odd metadata: it must give an Error or a working Tokenizer.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8_stream.h"

namespace {

using edgelm::gguf::Writer;
using edgelm::tokenizer::Tokenizer;
using edgelm::tokenizer::TokenType;

#define FUZZ_CHECK(cond)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                           \
    }                                                                         \
  } while (0)

const std::string kSp = "\xE2\x96\x81";

Tokenizer build(const Writer& w) {
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = edgelm::gguf::File::parse(edgelm::MappedFile::view(bytes.data(), bytes.size()));
  FUZZ_CHECK(f.ok());
  auto t = Tokenizer::from_gguf(*f);
  if (!t.ok()) std::fprintf(stderr, "%s\n", t.message().c_str());
  FUZZ_CHECK(t.ok());
  return std::move(t).value();
}

Writer spm_vocab() {
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    toks.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    scores.push_back(0);
    types.push_back(6);
  }
  const char* pieces[] = {"a", "b", "c", "ab", "bc", "abc", "aa", "aaa", "\xC3\xA9", "\xE2\x82\xAC"};
  float s = -1;
  for (const char* p : pieces) {
    for (const std::string& t : {std::string(p), kSp + p}) {
      toks.push_back(t);
      scores.push_back(s);
      types.push_back(1);
      s -= 0.5f;
    }
  }
  toks.push_back(kSp);
  scores.push_back(-0.25f);
  types.push_back(1);
  for (const char* sp : {"<|im_start|>", "<|im_end|>"}) {
    toks.push_back(sp);
    scores.push_back(0);
    types.push_back(3);
  }
  toks.push_back("<tool>");
  scores.push_back(0);
  types.push_back(4);
  Writer w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", toks);
  w.set_f32s("tokenizer.ggml.scores", scores);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  return w;
}

Writer bpe_vocab(const std::string& pre) {
  std::vector<std::string> toks;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    toks.emplace_back(edgelm::tokenizer::byte_to_unicode(static_cast<uint8_t>(b)));
    types.push_back(1);
  }
  const std::string G(edgelm::tokenizer::byte_to_unicode(' '));
  const std::string C3(edgelm::tokenizer::byte_to_unicode(0xC3)), A9(edgelm::tokenizer::byte_to_unicode(0xA9));
  const std::vector<std::pair<std::string, std::string>> rules = {
      {"a", "b"}, {"b", "c"}, {"ab", "c"}, {"a", "a"}, {"aa", "a"}, {G, "a"}, {G + "a", "b"},
      {"1", "2"}, {"12", "3"}, {C3, A9}, {G, G}, {G + G, G}, {"\xC4\x8A", "\xC4\x8A"}};
  std::vector<std::string> merges;
  for (const auto& [l, r] : rules) {
    merges.push_back(l + " " + r);
    const std::string j = l + r;
    bool have = false;
    for (const auto& t : toks) have |= t == j;
    if (!have) {
      toks.push_back(j);
      types.push_back(1);
    }
  }
  const auto eot = static_cast<uint32_t>(toks.size());
  for (const char* sp : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    toks.push_back(sp);
    types.push_back(3);
  }
  toks.push_back("<tool>");
  types.push_back(4);
  Writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  w.set_strings("tokenizer.ggml.tokens", toks);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", merges);
  w.set_u32("tokenizer.ggml.bos_token_id", eot);
  w.set_u32("tokenizer.ggml.eos_token_id", eot);
  return w;
}

struct Vocabs {
  std::vector<Tokenizer> all;  // [0] is SPM, the rest byte-level BPE
  Vocabs() {
    all.push_back(build(spm_vocab()));
    for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "default", "starcoder", "deepseek-llm", "deepseek-coder",
                            "falcon", "tekken", "gpt-4o"})
      all.push_back(build(bpe_vocab(pre)));
  }
};

bool has_special(const Tokenizer& t, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    const TokenType ty = t.type(id);
    if (ty == TokenType::kControl || ty == TokenType::kUserDefined || ty == TokenType::kUnknown) return true;
  }
  return false;
}

// A vocab made from the input: lines are token texts.
void fuzz_loader(uint8_t ctl, std::string_view text) {
  std::vector<std::string> toks;
  for (size_t pos = 0; pos <= text.size() && toks.size() < 200;) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    toks.emplace_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  const bool bpe = ctl & 1;
  std::vector<int32_t> types;
  std::vector<float> scores;
  std::vector<std::string> merges;
  for (size_t i = 0; i < toks.size(); ++i) {
    const uint8_t h = toks[i].empty() ? 0 : static_cast<uint8_t>(toks[i].back());
    types.push_back(h % 7);
    scores.push_back(static_cast<float>(static_cast<int8_t>(h)) / 8.0f);
    if (i + 1 < toks.size()) merges.push_back(toks[i] + " " + toks[i + 1]);
  }
  Writer w;
  w.set_string("tokenizer.ggml.model", bpe ? "gpt2" : "llama");
  if (bpe) {
    static const char* pres[] = {"gpt-2", "llama-bpe", "qwen2", "default", "gemma4", "deepseek-llm"};
    w.set_string("tokenizer.ggml.pre", pres[(ctl >> 1) % 6]);
    w.set_strings("tokenizer.ggml.merges", merges);
  }
  w.set_strings("tokenizer.ggml.tokens", toks);
  if (ctl & 0x08) w.set_i32s("tokenizer.ggml.token_type", types);
  if (ctl & 0x10) w.set_f32s("tokenizer.ggml.scores", scores);
  if (ctl & 0x20) w.set_u32("tokenizer.ggml.bos_token_id", (ctl >> 2) & 7);
  if (ctl & 0x40) w.set_u32("tokenizer.ggml.eos_token_id", ctl & 7);
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = edgelm::gguf::File::parse(edgelm::MappedFile::view(bytes.data(), bytes.size()));
  FUZZ_CHECK(f.ok());
  auto t = Tokenizer::from_gguf(*f);
  if (!t.ok()) {
    FUZZ_CHECK(!t.message().empty());
    return;
  }
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = t->encode(text, special, special);
    for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < t->n_vocab());
    (void)t->decode(ids, !special);
  }
  for (int32_t id = -1; id <= t->n_vocab(); ++id) {
    (void)t->token_piece_view(id, true);
    (void)t->is_eog(id);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Vocabs vocabs;
  if (size == 0) return 0;
  const uint8_t ctl = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (ctl & 0x80) {
    fuzz_loader(ctl, text);
    return 0;
  }
  const Tokenizer& tok = vocabs.all[ctl % vocabs.all.size()];
  const bool add_special = (ctl >> 4) & 1, parse_special = (ctl >> 5) & 1, skip_special = (ctl >> 6) & 1;

  const std::vector<int32_t> ids = tok.encode(text, add_special, parse_special);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tok.n_vocab());

  const std::string decoded = tok.decode(ids, skip_special);
  // Streaming the pieces gives the decode, sanitised (the first piece keeps
  // the SPM prefix space that decode drops, so compare from the same start).
  edgelm::tokenizer::Utf8Stream stream;
  std::string streamed;
  for (int32_t id : ids) stream.push(tok.token_piece_view(id, !skip_special), streamed);
  stream.flush(streamed);
  std::string pieces;
  for (int32_t id : ids) pieces += tok.token_piece_view(id, !skip_special);
  std::string want;
  edgelm::tokenizer::utf8_sanitize_append(want, pieces);
  FUZZ_CHECK(streamed == want);
  FUZZ_CHECK(edgelm::tokenizer::utf8_is_valid(streamed));

  if (!parse_special && !has_special(tok, ids)) {
    const std::string plain = tok.decode(ids, true);
    if (tok.kind() == edgelm::tokenizer::VocabKind::kBpe) {
      std::string clean;
      edgelm::tokenizer::utf8_sanitize_append(clean, text);
      FUZZ_CHECK(plain == clean);
    } else if (text.find(kSp) == std::string_view::npos) {
      FUZZ_CHECK(plain == text);
    }
  }
  // Out-of-range ids are harmless.
  const int32_t bad[] = {-1, tok.n_vocab(), INT32_MIN, INT32_MAX};
  FUZZ_CHECK(tok.decode(bad).empty());
  return 0;
}
