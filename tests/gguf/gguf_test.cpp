#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "gguf/writer.h"
#include "testutil.h"

namespace edgelm::gguf {
namespace {

Writer sample_writer() {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 5);
  w.set_i32("answer", -42);
  w.set_u64("big", 1ull << 40);
  w.set_f32("llama.rope.freq_base", 10000.0f);
  w.set_f64("pi", 3.14159);
  w.set_bool("flag", true);
  w.set_u8("u8", 200);
  w.set_i16("i16", -300);
  w.set_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "hello"});
  w.set_f32s("tokenizer.ggml.scores", {0.0f, -1.5f, 2.25f, 3.0f});
  w.set_i32_arrays("nested", {{1, 2}, {}, {3, 4, 5}});
  std::vector<uint8_t> a(4 * 8 * 4);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i);
  w.add_tensor("a", DType::F32, {8, 4}, a);
  w.add_tensor("b", DType::Q8_0, {64, 2}, std::vector<uint8_t>(2 * 2 * 34, 7));
  return w;
}

Result<File> parse_bytes(const std::vector<uint8_t>& bytes) {
  return File::parse(MappedFile::view(bytes.data(), bytes.size()));
}

TEST(Gguf, RoundTripsEveryValueType) {
  auto bytes = sample_writer().to_bytes();
  auto f = parse_bytes(bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture").value(), "llama");
  EXPECT_EQ(f->get_uint("llama.block_count").value(), 5u);
  EXPECT_EQ(f->find("answer")->as_int().value(), -42);
  EXPECT_FALSE(f->find("answer")->as_uint().has_value());
  EXPECT_EQ(f->get_uint("big").value(), 1ull << 40);
  EXPECT_FLOAT_EQ(f->get_float("llama.rope.freq_base").value(), 10000.0f);
  EXPECT_DOUBLE_EQ(f->get_float("pi").value(), 3.14159);
  EXPECT_TRUE(f->get_bool("flag").value());
  EXPECT_EQ(f->find("u8")->as_int().value(), 200);
  EXPECT_EQ(f->find("i16")->as_int().value(), -300);

  const Value* toks = f->find("tokenizer.ggml.tokens");
  ASSERT_NE(toks, nullptr);
  ASSERT_EQ(toks->size(), 4u);
  EXPECT_EQ(toks->string_at(3).value(), "hello");
  EXPECT_EQ(toks->string_at(0).value(), "<unk>");
  EXPECT_DOUBLE_EQ(f->find("tokenizer.ggml.scores")->float_at(1).value(), -1.5);

  const Value* nested = f->find("nested");
  ASSERT_EQ(nested->size(), 3u);
  EXPECT_EQ(nested->elem_type(), ValueType::ARRAY);
  EXPECT_EQ(nested->array_at(1).size(), 0u);
  EXPECT_EQ(nested->array_at(2).int_at(2).value(), 5);

  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorInfo* a = f->find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ne[0], 8);
  EXPECT_EQ(a->ne[1], 4);
  EXPECT_EQ(a->nbytes, 128u);
  EXPECT_EQ(f->tensor_data(*a)[5], 5);
  const TensorInfo* b = f->find_tensor("b");
  EXPECT_EQ(b->type, DType::Q8_0);
  EXPECT_EQ(b->nbytes, 2u * 2 * 34);
  EXPECT_EQ(b->offset % 32, 0u);
  EXPECT_EQ(f->tensor_data(*b)[0], 7);
}

TEST(Gguf, TypedGettersNameTheKey) {
  auto bytes = sample_writer().to_bytes();
  auto f = parse_bytes(bytes);
  ASSERT_TRUE(f.ok());
  auto missing = f->get_uint("llama.context_length");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("llama.context_length"), std::string::npos);
  auto wrong = f->get_uint("general.architecture");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("string"), std::string::npos);
}

TEST(Gguf, CopiesValuesVerbatim) {
  auto bytes = sample_writer().to_bytes();
  auto f = parse_bytes(bytes);
  ASSERT_TRUE(f.ok());
  Writer w2;
  for (const auto& kv : f->metadata()) w2.set_value(std::string(kv.key), kv.value);
  auto bytes2 = w2.to_bytes();
  auto f2 = parse_bytes(bytes2);
  ASSERT_TRUE(f2.ok()) << f2.message();
  EXPECT_EQ(f2->find("nested")->array_at(2).int_at(1).value(), 4);
  EXPECT_EQ(f2->find("tokenizer.ggml.tokens")->string_at(3).value(), "hello");
}

TEST(Gguf, HonoursAlignment) {
  Writer w = sample_writer();
  w.set_alignment(64);
  auto bytes = w.to_bytes();
  auto f = parse_bytes(bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  for (const auto& t : f->tensors()) EXPECT_EQ(t.offset % 64, 0u);
}

TEST(Gguf, WritesAndOpensFiles) {
  std::string path = test::temp_path("roundtrip.gguf");
  ASSERT_TRUE(sample_writer().write(path).ok());
  auto f = File::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->tensors().size(), 2u);
  auto none = File::open(test::temp_path("does-not-exist.gguf"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("cannot open"), std::string::npos);
}

// --- hostile input --------------------------------------------------------

void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto f = parse_bytes(bytes);
  ASSERT_FALSE(f.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_NE(f.message().find(needle), std::string::npos) << f.message();
  EXPECT_EQ(f.message().find('\n'), std::string::npos) << "error must be one line";
}

template <typename T>
void poke(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof(T));
}

TEST(GgufHostile, RejectsNonGguf) {
  expect_error({}, "not a GGUF file");
  expect_error({'G', 'G'}, "not a GGUF file");
  expect_error({'P', 'K', 3, 4, 0, 0, 0, 0}, "bad magic");
}

TEST(GgufHostile, RejectsBadVersions) {
  auto b = sample_writer().to_bytes();
  poke<uint32_t>(b, 4, 1);
  expect_error(b, "version 1");
  poke<uint32_t>(b, 4, 99);
  expect_error(b, "unsupported GGUF version 99");
  poke<uint32_t>(b, 4, 0x03000000);
  expect_error(b, "big-endian");
}

TEST(GgufHostile, RejectsHugeCounts) {
  auto b = sample_writer().to_bytes();
  auto c = b;
  poke<uint64_t>(c, 8, 1ull << 60);
  expect_error(c, "tensor count");
  c = b;
  poke<uint64_t>(c, 16, 1ull << 60);
  expect_error(c, "metadata count");
}

TEST(GgufHostile, RejectsHugeStringAndArrayLengths) {
  Writer w;
  w.set_strings("tokens", {"a", "b"});
  auto b = w.to_bytes();
  // header 24 bytes, key: 8 + 6, type 4, elem type 4, then the count.
  const size_t count_off = 24 + 8 + 6 + 4 + 4;
  auto c = b;
  poke<uint64_t>(c, count_off, 1ull << 62);
  expect_error(c, "more than the file holds");
  c = b;
  poke<uint64_t>(c, 24, 1ull << 50);  // key length
  expect_error(c, "truncated");
}

TEST(GgufHostile, RejectsTruncationAtEveryByte) {
  auto b = sample_writer().to_bytes();
  auto full = parse_bytes(b);
  ASSERT_TRUE(full.ok());
  // The last tensor's trailing alignment padding is optional; everything before it is not.
  uint64_t end = 0;
  for (const auto& t : full->tensors()) end = std::max(end, full->data_offset() + t.offset + t.nbytes);
  for (size_t n = 0; n < end; ++n) {
    std::vector<uint8_t> c(b.begin(), b.begin() + static_cast<long>(n));
    auto f = parse_bytes(c);
    EXPECT_FALSE(f.ok()) << "truncated to " << n << " bytes was accepted";
  }
}

TEST(GgufHostile, RejectsTensorsPastTheEndAndOverlaps) {
  Writer w;
  w.add_tensor("x", DType::F32, {8}, std::vector<uint8_t>(32, 1));
  w.add_tensor("y", DType::F32, {8}, std::vector<uint8_t>(32, 2));
  auto b = w.to_bytes();
  auto f = parse_bytes(b);
  ASSERT_TRUE(f.ok());
  // Tensor infos start at 24; each: name (8+1), n_dims 4, dim 8, type 4, offset 8.
  const size_t y_offset_field = 24 + 33 + 8 + 1 + 4 + 8 + 4;
  auto c = b;
  poke<uint64_t>(c, y_offset_field, 0);
  expect_error(c, "overlap");
  c = b;
  poke<uint64_t>(c, y_offset_field, 1 << 20);
  expect_error(c, "runs past the end");
  c = b;
  poke<uint64_t>(c, y_offset_field, 7);
  expect_error(c, "alignment");
  c = b;
  poke<uint32_t>(c, 24 + 8 + 1, 9);  // n_dims of x
  expect_error(c, "dimensions");
  c = b;
  poke<uint32_t>(c, 24 + 8 + 1 + 4 + 8, 77);  // type of x
  expect_error(c, "unknown type id 77");
  c = b;
  poke<uint64_t>(c, 24 + 8 + 1 + 4, 1ull << 62);  // dim of x
  expect_error(c, "");
}

TEST(GgufHostile, RejectsBadBlockMultiple) {
  Writer w;
  w.add_tensor("q", DType::Q4_0, {32}, std::vector<uint8_t>(18, 0));
  auto b = w.to_bytes();
  poke<uint64_t>(b, 24 + 8 + 1 + 4, 33);
  expect_error(b, "not a multiple of the block size");
}

TEST(GgufHostile, RejectsDuplicates) {
  Writer w;
  w.add_tensor("x", DType::F32, {8}, std::vector<uint8_t>(32, 1));
  w.add_tensor("x", DType::F32, {8}, std::vector<uint8_t>(32, 2));
  expect_error(w.to_bytes(), "duplicate tensor name");
}

TEST(GgufHostile, RandomBitFlipsNeverCrash) {
  auto b = sample_writer().to_bytes();
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto c = b;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) c[rng() % c.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    auto f = parse_bytes(c);
    if (f.ok()) {
      ++accepted;
      for (const auto& t : f->tensors()) {
        ASSERT_LE(f->data_offset() + t.offset + t.nbytes, c.size());
      }
      for (const auto& kv : f->metadata()) (void)format_value(kv.value);
    }
  }
  // Flips inside tensor data or values keep the file valid; most others do not.
  EXPECT_GT(accepted, 0);
}

TEST(GgufHostile, RandomBytesNeverCrash) {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> c(8 + rng() % 512);
    for (auto& x : c) x = static_cast<uint8_t>(rng());
    poke<uint32_t>(c, 0, kMagic);
    poke<uint32_t>(c, 4, 3);
    auto f = parse_bytes(c);
    (void)f;
  }
}

TEST(GgufShared, ReadsStories260K) {
  EDGELM_REQUIRE_SHARED(path, "stories260K.gguf");
  auto f = File::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->get_string("general.architecture").value(), "llama");
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->size(), 512u);
}

}  // namespace
}  // namespace edgelm::gguf

namespace edgelm::gguf {
namespace {

// Found by fuzz_gguf: a key name with a newline made a two-line error.
TEST(GgufHostile, ErrorsStayOneLineWhateverTheNames) {
  Writer w;
  w.set_u32("evil\nkey", 1);
  auto b = w.to_bytes();
  poke<uint32_t>(b, 24 + 8 + 8, 99);  // the value type of "evil\nkey"
  expect_error(b, "evil\\x0akey");
}

}  // namespace
}  // namespace edgelm::gguf
