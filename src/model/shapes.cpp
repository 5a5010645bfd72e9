#include "model/shapes.h"

#include <fmt/format.h>

namespace edgelm {

const std::vector<Shape>& known_shapes() {
  // name, arch, layers, embd, heads, kv heads, head dim, ffn, vocab, ctx, rope base, rms eps, tied
  static const std::vector<Shape> shapes = {
      {"qwen2-0.5b", Arch::Qwen2, 24, 896, 14, 2, 64, 4864, 151936, 32768, 1000000.f, 1e-6f, true},
      {"qwen2-1.5b", Arch::Qwen2, 28, 1536, 12, 2, 128, 8960, 151936, 32768, 1000000.f, 1e-6f, true},
      {"qwen2-7b", Arch::Qwen2, 28, 3584, 28, 4, 128, 18944, 152064, 32768, 1000000.f, 1e-6f, false},
      {"qwen3-0.6b", Arch::Qwen3, 28, 1024, 16, 8, 128, 3072, 151936, 40960, 1000000.f, 1e-6f, true},
      {"qwen3-1.7b", Arch::Qwen3, 28, 2048, 16, 8, 128, 6144, 151936, 40960, 1000000.f, 1e-6f, true},
      {"llama-1b", Arch::Llama, 16, 2048, 32, 8, 64, 8192, 128256, 131072, 500000.f, 1e-5f, true},
      {"llama-3b", Arch::Llama, 28, 3072, 24, 8, 128, 8192, 128256, 131072, 500000.f, 1e-5f, true},
      {"llama-7b", Arch::Llama, 32, 4096, 32, 32, 128, 11008, 32000, 4096, 10000.f, 1e-5f, false},
      {"smollm2-135m", Arch::Llama, 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.f, 1e-5f, true},
      // Tiny shapes for tests: real structure, widths that every quant type accepts.
      {"tiny-llama", Arch::Llama, 2, 256, 4, 2, 64, 512, 512, 2048, 10000.f, 1e-5f, false},
      {"tiny-qwen2", Arch::Qwen2, 2, 256, 4, 2, 64, 512, 512, 2048, 1000000.f, 1e-6f, true},
      {"tiny-qwen3", Arch::Qwen3, 2, 256, 4, 2, 128, 512, 512, 2048, 1000000.f, 1e-6f, true},
      // Rows of 192 are no multiple of 256: as in Qwen2-0.5B (896), the K
      // mixes fall back to Q5_0 / Q8_0 there, so one input feeds matrices of
      // different 32-element formats (attn_q/k Q5_0, layer 1's attn_v Q8_0).
      {"tiny-narrow", Arch::Qwen2, 2, 192, 3, 1, 64, 512, 512, 2048, 1000000.f, 1e-6f, true},
  };
  return shapes;
}

Result<Shape> find_shape(std::string_view name) {
  std::string names;
  for (const Shape& s : known_shapes()) {
    if (s.name == name) return s;
    names += (names.empty() ? "" : ", ") + std::string(s.name);
  }
  return make_error("unknown shape '{}' (known: {})", name, names);
}

ModelConfig config_from_shape(const Shape& s, int n_vocab) {
  ModelConfig c;
  c.arch = s.arch;
  c.arch_name = std::string(arch_label(s.arch));
  c.name = std::string(s.name);
  c.n_layers = s.n_layers;
  c.n_embd = s.n_embd;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.head_dim = s.head_dim;
  c.head_dim_v = s.head_dim;
  c.n_ff = s.n_ff;
  c.n_vocab = n_vocab > 0 ? n_vocab : s.n_vocab;
  c.n_ctx_train = s.n_ctx;
  c.rope_base = s.rope_base;
  c.rope_dim = s.head_dim;
  c.rope_neox = s.arch != Arch::Llama;
  c.rms_eps = s.rms_eps;
  c.qkv_bias = s.arch == Arch::Qwen2;
  c.qk_norm = s.arch == Arch::Qwen3;
  c.tied_output = s.tied;
  return c;
}

std::vector<std::string_view> known_ftypes() {
  return {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"};
}

namespace {

// The layers that get more bits in llama.cpp's _M mixes: the first and last
// eighths and every third layer between.
bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// A K-quant needs rows that are a multiple of 256; narrower rows fall back to
// the nearest 32-block type, as llama.cpp does.
DType fit_rows(DType t, int64_t cols) {
  if (dtype_info(t).block_size <= static_cast<uint32_t>(32) || cols % 256 == 0) return t;
  switch (t) {
    case DType::Q6_K: return DType::Q8_0;
    case DType::Q5_K: return DType::Q5_1;
    case DType::Q4_K: return DType::Q5_0;
    default: return DType::Q4_0;  // Q2_K/Q3_K (llama.cpp would use IQ4_NL)
  }
}

}  // namespace

Result<std::vector<TensorPlan>> tensor_plan(const ModelConfig& c, std::string_view ftype) {
  DType base;
  DType out_type = DType::Q6_K;
  bool mixed = false;  // attn_v / ffn_down / attn_output get different types per layer
  if (ftype == "F32") base = out_type = DType::F32;
  else if (ftype == "F16") base = out_type = DType::F16;
  else if (ftype == "BF16") base = out_type = DType::BF16;
  else if (ftype == "Q8_0") base = out_type = DType::Q8_0;
  else if (ftype == "Q4_0") base = DType::Q4_0;
  else if (ftype == "Q4_1") base = DType::Q4_1;
  else if (ftype == "Q5_0") base = DType::Q5_0;
  else if (ftype == "Q5_1") base = DType::Q5_1;
  else if (ftype == "Q6_K") base = DType::Q6_K;
  else if (ftype == "Q2_K") base = DType::Q2_K, mixed = true;
  else if (ftype == "Q3_K_M") base = DType::Q3_K, mixed = true;
  else if (ftype == "Q4_K_M") base = DType::Q4_K, mixed = true;
  else if (ftype == "Q5_K_M") base = DType::Q5_K, mixed = true;
  else {
    std::string names;
    for (auto n : known_ftypes()) names += (names.empty() ? "" : ", ") + std::string(n);
    return make_error("unknown type '{}' (known: {})", ftype, names);
  }

  std::vector<TensorPlan> t;
  auto mat = [&](std::string name, DType type, int64_t cols, int64_t rows) {
    t.push_back({std::move(name), fit_rows(type, cols), {cols, rows}});
  };
  auto vec = [&](std::string name, int64_t n) { t.push_back({std::move(name), DType::F32, {n}}); };

  // The output matrix (or the tied embedding that serves as it) keeps more bits.
  mat("token_embd.weight", c.tied_output ? out_type : base, c.n_embd, c.n_vocab);
  vec("output_norm.weight", c.n_embd);
  if (!c.tied_output) mat("output.weight", out_type, c.n_embd, c.n_vocab);
  if (c.has_rope_freqs) vec("rope_freqs.weight", c.rope_dim / 2);

  const int n = c.n_layers;
  for (int i = 0; i < n; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    DType v_type = base, down_type = base, o_type = base;
    if (mixed) {
      if (base == DType::Q4_K || base == DType::Q5_K) {
        if (more_bits(i, n)) v_type = down_type = DType::Q6_K;
      } else if (base == DType::Q3_K) {
        v_type = i < 2 ? DType::Q5_K : DType::Q4_K;
        down_type = i < n / 16 ? DType::Q5_K : DType::Q4_K;
        o_type = DType::Q4_K;
      } else if (base == DType::Q2_K) {
        v_type = down_type = DType::Q3_K;
      }
    }
    vec(p + "attn_norm.weight", c.n_embd);
    mat(p + "attn_q.weight", base, c.n_embd, c.q_dim());
    mat(p + "attn_k.weight", base, c.n_embd, c.k_dim());
    mat(p + "attn_v.weight", v_type, c.n_embd, c.v_dim());
    mat(p + "attn_output.weight", o_type, c.attn_out_dim(), c.n_embd);
    if (c.qkv_bias) {
      vec(p + "attn_q.bias", c.q_dim());
      vec(p + "attn_k.bias", c.k_dim());
      vec(p + "attn_v.bias", c.v_dim());
    }
    if (c.qk_norm) {
      vec(p + "attn_q_norm.weight", c.head_dim);
      vec(p + "attn_k_norm.weight", c.head_dim);
    }
    vec(p + "ffn_norm.weight", c.n_embd);
    mat(p + "ffn_gate.weight", base, c.n_embd, c.n_ff);
    mat(p + "ffn_up.weight", base, c.n_embd, c.n_ff);
    mat(p + "ffn_down.weight", down_type, c.n_ff, c.n_embd);
  }
  return t;
}

}  // namespace edgelm

namespace edgelm {

std::vector<gguf::TensorInfo> tensor_infos(const std::vector<TensorPlan>& plan) {
  std::vector<gguf::TensorInfo> out;
  uint64_t off = 0;
  for (const TensorPlan& p : plan) {
    gguf::TensorInfo t;
    t.name = p.name;
    t.n_dims = static_cast<uint32_t>(p.dims.size());
    for (size_t d = 0; d < p.dims.size(); ++d) t.ne[d] = p.dims[d];
    t.type = p.type;
    t.offset = off;
    t.nbytes = row_bytes(p.type, t.ne[0]) * static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]);
    off += (t.nbytes + 31) / 32 * 32;
    out.push_back(t);
  }
  return out;
}

}  // namespace edgelm
