#include "model/synth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "kernels/kernels.h"

namespace edgelm {
namespace {

// llama.cpp's general.file_type numbers for the mixes we write.
uint32_t file_type_id(std::string_view f) {
  if (f == "F32") return 0;
  if (f == "F16") return 1;
  if (f == "Q4_0") return 2;
  if (f == "Q4_1") return 3;
  if (f == "Q8_0") return 7;
  if (f == "Q5_0") return 8;
  if (f == "Q5_1") return 9;
  if (f == "Q2_K") return 10;
  if (f == "Q3_K_M") return 12;
  if (f == "Q4_K_M") return 15;
  if (f == "Q5_K_M") return 17;
  if (f == "Q6_K") return 18;
  if (f == "BF16") return 32;
  return 0;
}

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Deterministic value in [-1, 1) for element i of stream s: rows can be
// generated in any order and on any thread.
float noise(uint64_t s, uint64_t i) {
  return static_cast<float>(static_cast<double>(mix(s ^ mix(i)) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

uint64_t name_hash(const std::string& n) {
  uint64_t h = 1469598103934665603ull;
  for (char c : n) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// A small SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte
// tokens, then common pieces, padded to n tokens.
void builtin_vocab(gguf::Writer& w, int n) {
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    toks.push_back(fmt::format("<0x{:02X}>", b));
    scores.push_back(0);
    types.push_back(6);
  }
  const std::string sp = "\u2581";  // SentencePiece's visible space
  const std::string pieces[] = {sp, "e", "t", "a", "o", "n", "i", "s", "h", "r", "d", "l", "u",
                                sp + "t", sp + "a", "he", "in", "er", "an", sp + "the", "on", "re",
                                sp + "s", sp + "w", "at", "en", "nd", "ou", sp + "o", "ed"};
  float score = -1;
  for (const std::string& p : pieces) {
    toks.push_back(p);
    scores.push_back(score);
    score -= 1;
    types.push_back(1);
  }
  for (int i = static_cast<int>(toks.size()); i < n; ++i) {
    toks.push_back(fmt::format("<unused{}>", i));
    scores.push_back(-1000);
    types.push_back(5);
  }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", toks);
  w.set_f32s("tokenizer.ggml.scores", scores);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
}

}  // namespace

Result<int64_t> write_synthetic_model(const SynthOptions& o) {
  EDGELM_ASSIGN(Shape shape, find_shape(o.shape));
  gguf::Writer w;
  int n_vocab = shape.n_vocab;
  std::optional<gguf::File> vocab;
  if (!o.vocab.empty()) {
    EDGELM_ASSIGN(gguf::File v, gguf::File::open(o.vocab));
    const gguf::Value* toks = v.find("tokenizer.ggml.tokens");
    if (!toks || toks->elem_type() != gguf::ValueType::STRING || toks->size() == 0)
      return make_error("{}: no tokenizer.ggml.tokens array", o.vocab);
    n_vocab = static_cast<int>(toks->size());
    vocab = std::move(v);
  } else {
    n_vocab = std::min(n_vocab, 512);
  }
  ModelConfig c = config_from_shape(shape, n_vocab);
  EDGELM_ASSIGN(std::vector<TensorPlan> plan, tensor_plan(c, o.ftype));

  const std::string a = c.arch_name + ".";
  w.set_string("general.architecture", c.arch_name);
  w.set_string("general.name", fmt::format("edgelm synthetic {} {}", o.shape, o.ftype));
  w.set_string("general.description", "synthetic weights (seeded noise) in a real architecture; its text is noise");
  w.set_u32("general.file_type", file_type_id(o.ftype));
  w.set_u32("general.quantization_version", 2);
  w.set_u32(a + "block_count", static_cast<uint32_t>(c.n_layers));
  w.set_u32(a + "context_length", static_cast<uint32_t>(c.n_ctx_train));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(c.n_embd));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(c.n_ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(c.n_heads));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  if (c.head_dim * c.n_heads != c.n_embd) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(c.head_dim));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(c.head_dim_v));
  }
  w.set_f32(a + "rope.freq_base", c.rope_base);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
  if (c.arch == Arch::Llama) {
    w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(c.rope_dim));
    w.set_u32(a + "vocab_size", static_cast<uint32_t>(n_vocab));
  }
  if (vocab) {
    for (const auto& kv : vocab->metadata())
      if (kv.key.rfind("tokenizer.", 0) == 0) w.set_value(std::string(kv.key), kv.value);
  } else {
    builtin_vocab(w, n_vocab);
  }

  int64_t params = 0;
  const int threads = std::max(1, o.threads);
  for (const TensorPlan& t : plan) {
    const int64_t cols = t.dims[0];
    const int64_t rows = t.dims.size() > 1 ? t.dims[1] : 1;
    params += cols * rows;
    const uint64_t stream = mix(o.seed) ^ name_hash(t.name);
    const bool is_norm = t.name.find("norm") != std::string::npos;
    const bool is_bias = t.name.find(".bias") != std::string::npos;
    const DType type = t.type;
    // Scale so that activations stay O(1) through the layers: ~1/sqrt(fan-in).
    const float scale = is_norm ? 0.1f : is_bias ? 0.02f : 1.0f / std::sqrt(static_cast<float>(cols));
    w.add_tensor(t.name, type, t.dims, [=](std::span<uint8_t> dst) {
      const size_t rb = row_bytes(type, cols);
      auto work = [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t i = 0; i < cols; ++i) {
            const float u = noise(stream, static_cast<uint64_t>(r * cols + i));
            row[static_cast<size_t>(i)] = is_norm ? 1.0f + scale * u : scale * u * 1.7320508f;  // unit variance
          }
          kernels::quantize_row(type, row.data(), dst.data() + static_cast<size_t>(r) * rb, cols);
        }
      };
      if (rows < 64 || threads == 1) {
        work(0, rows);
        return;
      }
      std::vector<std::thread> pool;
      const int64_t per = (rows + threads - 1) / threads;
      for (int k = 0; k < threads; ++k) {
        const int64_t r0 = k * per, r1 = std::min(rows, r0 + per);
        if (r0 < r1) pool.emplace_back(work, r0, r1);
      }
      for (auto& th : pool) th.join();
    });
  }
  EDGELM_TRY(w.write(o.output));
  return params;
}

}  // namespace edgelm
