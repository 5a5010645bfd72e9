#include "model/weights.h"

#include <fmt/format.h>

#include <functional>
#include <utility>

namespace edgelm {
namespace {

// Norms, biases and frequency factors are read as plain floats by the forward pass.
enum class Kind { Matrix, Vector };

class Binder {
 public:
  using Lookup = std::function<const gguf::TensorInfo*(std::string_view)>;
  using Data = std::function<const uint8_t*(const gguf::TensorInfo&)>;
  Binder(std::string path, Lookup lookup, Data data)
      : path_(std::move(path)), lookup_(std::move(lookup)), data_(std::move(data)) {}

  Status bind(TensorView& out, const std::string& name, int64_t cols, int64_t rows, Kind kind,
              bool optional = false) {
    const gguf::TensorInfo* t = lookup_(name);
    if (!t) {
      if (optional) return Status::Ok();
      return make_error("{}: missing tensor '{}'", path_, name);
    }
    const bool shape_ok = kind == Kind::Vector
                              ? (t->n_dims == 1 && t->ne[0] == cols)
                              : (t->n_dims == 2 && t->ne[0] == cols && t->ne[1] == rows);
    if (!shape_ok) {
      std::string want = kind == Kind::Vector ? fmt::format("[{}]", cols) : fmt::format("[{}, {}]", cols, rows);
      return make_error("{}: tensor '{}' has shape {}, expected {}", path_, name, t->shape_string(), want);
    }
    const DTypeInfo& info = dtype_info(t->type);
    if (kind == Kind::Vector && t->type != DType::F32)
      return make_error("{}: tensor '{}' has type {}, expected F32", path_, name, info.name);
    if (!info.engine_supported)
      return make_error("{}: tensor '{}' has type {}, which edgelm cannot run (supported: F32, F16, BF16, Q8_0, "
                        "Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
                        path_, name, info.name);
    out.data = data_(*t);
    out.type = t->type;
    out.cols = t->ne[0];
    out.rows = kind == Kind::Vector ? 1 : t->ne[1];
    out.row_bytes = row_bytes(t->type, t->ne[0]);
    out.name = t->name;
    return Status::Ok();
  }

 private:
  std::string path_;
  Lookup lookup_;
  Data data_;
};

Result<ModelWeights> bind_with(Binder& b, const ModelConfig& c);

}  // namespace

uint64_t ModelWeights::bytes() const {
  auto sz = [](const TensorView& t) -> uint64_t { return t.present() ? t.bytes() : 0; };
  uint64_t n = sz(token_embd) + sz(output_norm) + sz(rope_freqs);
  if (output.data != token_embd.data) n += sz(output);
  for (const LayerWeights& l : layers) {
    for (const TensorView* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.q_norm,
                                &l.k_norm, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
      n += sz(*t);
  }
  return n;
}

uint64_t ModelWeights::bytes_packed_for(kernels::Isa isa) const {
  uint64_t n = bytes();
  auto adjust = [&](const TensorView& t) {
    if (!t.present() || t.layout != kernels::Layout::Rows) return;
    const kernels::Layout l = kernels::preferred_layout(isa, t.type, t.rows, t.cols);
    if (l != kernels::Layout::Rows) n = n - t.bytes() + kernels::packed_bytes(t.type, l, t.rows, t.cols);
  };
  for (const LayerWeights& l : layers)
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) adjust(*t);
  adjust(output);
  return n;
}

Result<ModelWeights> bind_weights(const gguf::File& f, const ModelConfig& c) {
  Binder b(
      f.path(), [&](std::string_view n) { return f.find_tensor(n); },
      [&](const gguf::TensorInfo& t) { return f.tensor_data(t); });
  return bind_with(b, c);
}

Result<ModelWeights> plan_weights(const ModelConfig& c, const std::vector<gguf::TensorInfo>& tensors) {
  // No file behind these views: every pointer is a non-null placeholder that
  // must never be read. Used to plan memory for a model not on disk.
  static const uint8_t kNoData = 0;
  Binder b(
      "<planned model>",
      [&](std::string_view n) -> const gguf::TensorInfo* {
        for (const auto& t : tensors)
          if (t.name == n) return &t;
        return nullptr;
      },
      [](const gguf::TensorInfo&) { return &kNoData; });
  return bind_with(b, c);
}

namespace {
Result<ModelWeights> bind_with(Binder& b, const ModelConfig& c) {
  ModelWeights w;
  EDGELM_TRY(b.bind(w.token_embd, "token_embd.weight", c.n_embd, c.n_vocab, Kind::Matrix));
  EDGELM_TRY(b.bind(w.output_norm, "output_norm.weight", c.n_embd, 1, Kind::Vector));
  if (c.tied_output) {
    w.output = w.token_embd;
  } else {
    EDGELM_TRY(b.bind(w.output, "output.weight", c.n_embd, c.n_vocab, Kind::Matrix));
  }
  if (c.has_rope_freqs) EDGELM_TRY(b.bind(w.rope_freqs, "rope_freqs.weight", c.rope_dim / 2, 1, Kind::Vector));

  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = fmt::format("blk.{}.", i);
    EDGELM_TRY(b.bind(l.attn_norm, p + "attn_norm.weight", c.n_embd, 1, Kind::Vector));
    EDGELM_TRY(b.bind(l.wq, p + "attn_q.weight", c.n_embd, c.q_dim(), Kind::Matrix));
    EDGELM_TRY(b.bind(l.wk, p + "attn_k.weight", c.n_embd, c.k_dim(), Kind::Matrix));
    EDGELM_TRY(b.bind(l.wv, p + "attn_v.weight", c.n_embd, c.v_dim(), Kind::Matrix));
    EDGELM_TRY(b.bind(l.wo, p + "attn_output.weight", c.attn_out_dim(), c.n_embd, Kind::Matrix));
    if (c.qkv_bias) {
      EDGELM_TRY(b.bind(l.bq, p + "attn_q.bias", c.q_dim(), 1, Kind::Vector));
      EDGELM_TRY(b.bind(l.bk, p + "attn_k.bias", c.k_dim(), 1, Kind::Vector));
      EDGELM_TRY(b.bind(l.bv, p + "attn_v.bias", c.v_dim(), 1, Kind::Vector));
    }
    if (c.qk_norm) {
      EDGELM_TRY(b.bind(l.q_norm, p + "attn_q_norm.weight", c.head_dim, 1, Kind::Vector));
      EDGELM_TRY(b.bind(l.k_norm, p + "attn_k_norm.weight", c.head_dim, 1, Kind::Vector));
    }
    EDGELM_TRY(b.bind(l.ffn_norm, p + "ffn_norm.weight", c.n_embd, 1, Kind::Vector));
    EDGELM_TRY(b.bind(l.w_gate, p + "ffn_gate.weight", c.n_embd, c.n_ff, Kind::Matrix));
    EDGELM_TRY(b.bind(l.w_up, p + "ffn_up.weight", c.n_embd, c.n_ff, Kind::Matrix));
    EDGELM_TRY(b.bind(l.w_down, p + "ffn_down.weight", c.n_ff, c.n_embd, Kind::Matrix));
  }
  return w;
}
}  // namespace

}  // namespace edgelm
