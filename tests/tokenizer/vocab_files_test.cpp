// llama.cpp's tokenizer test vectors (assets/vocab/ggml-vocab-*.gguf with
// .gguf.inp / .gguf.out, fetched by scripts/fetch-test-assets.sh) and the
// shared stories260K model. Skipped when the files are absent.
//
// File format, as tests/test-tokenizer-0.cpp reads it: .inp holds the cases,
// each followed by "\n__ggml_vocab_test__\n" (the last one may lack it); .out
// holds one line per case with the expected ids separated by spaces. The ids
// were produced with add_special = false and parse_special = false.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "gguf/gguf.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

namespace edgelm::tokenizer {
namespace {

struct Case {
  std::string input;
  std::vector<int32_t> ids;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<Case> read_cases(const std::string& inp_path, const std::string& out_path) {
  const std::string raw = read_file(inp_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Case> cases;
  std::ifstream out(out_path);
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    Case c;
    if (i < inputs.size()) c.input = inputs[i];
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  if (cases.size() != inputs.size()) return {};
  return cases;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

Tokenizer load_or_die(const std::string& path) {
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.ok()) << f.message();
  auto t = Tokenizer::from_gguf(*f);
  EXPECT_TRUE(t.ok()) << t.message();
  return std::move(t).value();
}

class VocabFile : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabFile, MatchesLlamaCppTestVectors) {
  const std::string name = "ggml-vocab-" + GetParam() + ".gguf";
  EDGELM_REQUIRE_VOCAB(path, name);
  if (!std::filesystem::exists(path + ".inp")) GTEST_SKIP() << name << ".inp not present";
  auto cases = read_cases(path + ".inp", path + ".out");
  ASSERT_FALSE(cases.empty()) << "could not read the test vectors of " << name;
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  auto tok = Tokenizer::from_gguf(*f);
  ASSERT_TRUE(tok.ok()) << tok.message();

  int failed = 0;
  for (const Case& c : cases) {
    const auto got = tok->encode(c.input, /*add_special=*/false, /*parse_special=*/false);
    if (got != c.ids) {
      ++failed;
      ADD_FAILURE() << name << ": input '" << c.input << "'\n  expected " << show(c.ids) << "\n  got      "
                    << show(got);
    }
  }
  RecordProperty("cases", static_cast<int>(cases.size()));
  EXPECT_EQ(failed, 0) << failed << " of " << cases.size() << " cases differ";
  std::printf("[ vocab    ] %s: %zu/%zu cases match\n", name.c_str(), cases.size() - failed, cases.size());
}

// Decoding the ids gives the input back (byte-exact) for valid UTF-8 input.
TEST_P(VocabFile, DecodeRoundTrips) {
  const std::string name = "ggml-vocab-" + GetParam() + ".gguf";
  EDGELM_REQUIRE_VOCAB(path, name);
  if (!std::filesystem::exists(path + ".inp")) GTEST_SKIP() << name << ".inp not present";
  auto cases = read_cases(path + ".inp", path + ".out");
  Tokenizer tok = load_or_die(path);
  for (const Case& c : cases) {
    for (bool add_special : {false, true}) {
      const auto ids = tok.encode(c.input, add_special, false);
      EXPECT_EQ(tok.decode(ids), c.input) << name << " add_special=" << add_special;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Required, VocabFile, ::testing::Values("llama-spm", "llama-bpe", "qwen2", "gpt-2"));
// Every other vocab with test vectors that this tokenizer supports.
INSTANTIATE_TEST_SUITE_P(Others, VocabFile,
                         ::testing::Values("phi-3", "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "refact",
                                           "command-r", "mpt", "qwen35", "gemma-4"));

// Vocabs without test vectors: they load, and text survives a round trip.
TEST(VocabFileNoVectors, LoadAndRoundTrip) {
  int tried = 0;
  for (const char* n : {"aquila", "baichuan", "gpt-neox"}) {
    const std::string dir = edgelm::test::vocab_dir();
    const std::string path = dir + "/ggml-vocab-" + n + ".gguf";
    if (dir.empty() || !std::filesystem::exists(path)) continue;
    ++tried;
    Tokenizer tok = load_or_die(path);
    const std::string text = "Hello world! \xC3\xA9t\xC3\xA9 42\n\tdone";
    const auto ids = tok.encode(text, false, false);
    EXPECT_FALSE(ids.empty()) << n;
    EXPECT_EQ(tok.decode(ids), text) << n;
  }
  if (tried == 0) GTEST_SKIP() << "assets/vocab not present (run scripts/fetch-test-assets.sh)";
}

// WordPiece (BERT) is not supported: a clear error, not a wrong tokenization.
TEST(VocabFileUnsupported, BertIsRejected) {
  EDGELM_REQUIRE_VOCAB(path, "ggml-vocab-bert-bge.gguf");
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  auto tok = Tokenizer::from_gguf(*f);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.message().find("'bert'"), std::string::npos) << tok.message();
}

// Phi-3's special tokens eat the whitespace after them (llama.cpp's rule,
// keyed on general.name); <|end|> is end-of-generation.
TEST(VocabFileSpecial, Phi3) {
  EDGELM_REQUIRE_VOCAB(path, "ggml-vocab-phi-3.gguf");
  Tokenizer tok = load_or_die(path);
  const int32_t user = *tok.find("<|user|>"), end = *tok.find("<|end|>"), assistant = *tok.find("<|assistant|>");
  EXPECT_EQ(tok.encode("<|user|>\nHello<|end|>\n<|assistant|>", true, true),
            (std::vector<int32_t>{1, user, *tok.find("\xE2\x96\x81Hello"), end, assistant}));
  EXPECT_TRUE(tok.is_eog(end));
  EXPECT_TRUE(tok.is_eog(tok.eos()));
}

// Llama 3's BOS comes from add_bos by default, and <|eot_id|> ends a turn.
TEST(VocabFileSpecial, Llama3) {
  EDGELM_REQUIRE_VOCAB(path, "ggml-vocab-llama-bpe.gguf");
  Tokenizer tok = load_or_die(path);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.bos(), 128000);
  const auto ids = tok.encode("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", true, true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ(ids[1], *tok.find("<|start_header_id|>"));
  EXPECT_EQ(ids.back(), *tok.find("<|eot_id|>"));
  EXPECT_TRUE(tok.is_eog(ids.back()));
  EXPECT_EQ(tok.eot(), ids.back());
  EXPECT_EQ(tok.decode(ids), "user\n\nHi");
}

TEST(Stories260K, EncodesLikeLlamaCpp) {
  EDGELM_REQUIRE_SHARED(path, "stories260K.gguf");
  Tokenizer tok = load_or_die(path);
  EXPECT_EQ(tok.kind(), VocabKind::kSpm);
  EXPECT_EQ(tok.encode("Once upon a time", true, false), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok.encode("Lily and Ben went to the park", true, false),
            (std::vector<int32_t>{1, 317, 269, 368, 302, 263, 377, 267, 265, 282, 295, 433}));
  EXPECT_EQ(tok.decode(tok.encode("Once upon a time", true, false)), "Once upon a time");
  EXPECT_TRUE(tok.is_eog(tok.eos()));
}

// About 1 MB of mixed text (the test vectors repeated) per vocab kind, plus
// inputs that would expose quadratic behaviour: one endless word, one
// whitespace run, a wall of special-token prefixes, random bytes.
//
// Under a sanitizer the inputs are 64 KB and there is no time bound: that
// run looks for memory errors on the same inputs; the plain build (CI's first
// stage) looks for quadratic behaviour. At 1 MB it took 114 s under clang's
// ASan, the longest test of that stage.
TEST(VocabFileSpeed, OneMegabyteIsFast) {
  EDGELM_REQUIRE_VOCAB(spm_path, "ggml-vocab-llama-spm.gguf");
  EDGELM_REQUIRE_VOCAB(bpe_path, "ggml-vocab-llama-bpe.gguf");
#ifdef EDGELM_SANITIZED
  constexpr size_t kBytes = 1u << 16;
  constexpr int kAttempts = 1;
#else
  constexpr size_t kBytes = 1u << 20;
  constexpr int kAttempts = 2;  // best of two: the machine may be busy
#endif
  const auto cases = read_cases(bpe_path + ".inp", bpe_path + ".out");
  std::string mixed;
  while (mixed.size() < kBytes)
    for (const Case& c : cases) mixed += c.input + "\n";
  std::string random_bytes(kBytes, '\0');
  uint32_t x = 12345;
  for (char& c : random_bytes) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  const std::vector<std::pair<std::string, std::string>> inputs = {
      {"mixed", mixed},
      {"one word", std::string(kBytes, 'a')},
      {"spaces", std::string(kBytes, ' ')},
      {"digits", std::string(kBytes, '7')},
      {"special prefixes", [] {
         std::string s;
         while (s.size() < kBytes) s += "<|begin_of_tex";
         return s;
       }()},
      {"random bytes", random_bytes},
  };
  for (const std::string& path : {spm_path, bpe_path}) {
    Tokenizer tok = load_or_die(path);
    for (const auto& [what, text] : inputs) {
      for (bool parse_special : {false, true}) {
        std::vector<int32_t> ids;
        double s = 1e9;
        for (int attempt = 0; attempt < kAttempts; ++attempt) {
          const auto t0 = std::chrono::steady_clock::now();
          ids = tok.encode(text, true, parse_special);
          s = std::min(s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::printf("[ speed    ] %-26s %-16s parse_special=%d: %7zu bytes -> %7zu tokens in %6.1f ms (%.1f MB/s)\n",
                    std::filesystem::path(path).filename().c_str(), what.c_str(), parse_special, text.size(),
                    ids.size(), s * 1e3, text.size() / s / 1e6);
        // Typical text takes ~0.1 s and the worst of these ~0.5 s on a quiet
        // machine; the bound only has to catch quadratic behaviour (minutes)
        // without failing on a busy shared one.
#ifndef EDGELM_SANITIZED
        EXPECT_LT(s, 10.0) << what;
#endif
        EXPECT_FALSE(ids.empty());
      }
    }
  }
}

}  // namespace
}  // namespace edgelm::tokenizer
