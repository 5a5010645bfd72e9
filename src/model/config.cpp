#include "model/config.h"

namespace edgelm {

std::string_view arch_label(Arch a) {
  switch (a) {
    case Arch::Llama: return "llama";
    case Arch::Qwen2: return "qwen2";
    case Arch::Qwen3: return "qwen3";
  }
  return "?";
}

namespace {

// A positive integer no larger than `max`, naming the key in every error.
Result<int> get_dim(const gguf::File& f, const std::string& key, int max) {
  EDGELM_ASSIGN(uint64_t v, f.get_uint(key));
  if (v == 0 || v > static_cast<uint64_t>(max))
    return make_error("{}: metadata '{}' = {} is out of range (1..{})", f.path(), key, v, max);
  return static_cast<int>(v);
}

Result<int> get_dim_or(const gguf::File& f, const std::string& key, int dflt, int max) {
  if (!f.find(key)) return dflt;
  return get_dim(f, key, max);
}

}  // namespace

Result<ModelConfig> load_config(const gguf::File& f) {
  ModelConfig c;
  EDGELM_ASSIGN(std::string_view arch, f.get_string("general.architecture"));
  c.arch_name = std::string(arch);
  if (arch == "llama") c.arch = Arch::Llama;
  else if (arch == "qwen2") c.arch = Arch::Qwen2;
  else if (arch == "qwen3") c.arch = Arch::Qwen3;
  else
    return make_error("{}: architecture '{}' is not supported (edgelm runs llama, qwen2 and qwen3)", f.path(),
                      printable(arch));
  c.name = std::string(f.get_string_or("general.name", ""));
  const std::string p = c.arch_name + ".";

  constexpr int kMaxWidth = 1 << 20;
  EDGELM_ASSIGN(c.n_layers, get_dim(f, p + "block_count", 4096));
  EDGELM_ASSIGN(c.n_embd, get_dim(f, p + "embedding_length", kMaxWidth));
  EDGELM_ASSIGN(c.n_ff, get_dim(f, p + "feed_forward_length", kMaxWidth));
  EDGELM_ASSIGN(c.n_heads, get_dim(f, p + "attention.head_count", 4096));
  EDGELM_ASSIGN(c.n_kv_heads, get_dim_or(f, p + "attention.head_count_kv", c.n_heads, 4096));
  EDGELM_ASSIGN(c.n_ctx_train, get_dim(f, p + "context_length", 1 << 24));
  if (c.n_embd % c.n_heads != 0 && !f.find(p + "attention.key_length"))
    return make_error("{}: embedding_length {} is not a multiple of head_count {} and no attention.key_length",
                      f.path(), c.n_embd, c.n_heads);
  EDGELM_ASSIGN(c.head_dim, get_dim_or(f, p + "attention.key_length", c.n_embd / c.n_heads, 1024));
  EDGELM_ASSIGN(c.head_dim_v, get_dim_or(f, p + "attention.value_length", c.head_dim, 1024));
  if (c.head_dim > 1024 || c.head_dim_v > 1024)
    return make_error("{}: head dimension {} is larger than edgelm supports (1024)", f.path(), c.head_dim);
  if (c.n_heads % c.n_kv_heads != 0)
    return make_error("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), c.n_heads,
                      c.n_kv_heads);
  if (c.head_dim % 2 != 0) return make_error("{}: head dimension {} must be even for RoPE", f.path(), c.head_dim);

  EDGELM_ASSIGN(double eps, f.get_float(p + "attention.layer_norm_rms_epsilon"));
  if (!(eps > 0 && eps < 1)) return make_error("{}: attention.layer_norm_rms_epsilon = {} is out of range", f.path(), eps);
  c.rms_eps = static_cast<float>(eps);

  c.rope_base = static_cast<float>(f.get_float_or(p + "rope.freq_base", 10000.0));
  if (!(c.rope_base > 1.0f)) return make_error("{}: rope.freq_base = {} is out of range", f.path(), c.rope_base);
  EDGELM_ASSIGN(c.rope_dim, get_dim_or(f, p + "rope.dimension_count", c.head_dim, c.head_dim));
  if (c.rope_dim % 2 != 0) return make_error("{}: rope.dimension_count {} must be even", f.path(), c.rope_dim);
  // Llama uses the interleaved (GPT-J style) rotation in GGUF's layout; Qwen's
  // converters keep the NeoX halves.
  c.rope_neox = c.arch != Arch::Llama;

  const std::string_view scaling = f.get_string_or(p + "rope.scaling.type", "none");
  double factor = f.get_float_or(p + "rope.scaling.factor", 0.0);
  if (factor == 0.0) factor = 1.0;
  if (scaling == "none" || factor == 1.0) {
    c.rope_scaling = RopeScaling::None;
  } else if (scaling == "linear") {
    c.rope_scaling = RopeScaling::Linear;
    c.rope_scale = static_cast<float>(factor);
  } else {
    return make_error("{}: rope.scaling.type '{}' is not supported (none and linear are)", f.path(), printable(scaling));
  }
  if (!(c.rope_scale > 0 && c.rope_scale < 1e4))
    return make_error("{}: rope.scaling.factor {} is out of range", f.path(), factor);

  c.qkv_bias = c.arch == Arch::Qwen2;
  c.qk_norm = c.arch == Arch::Qwen3;
  c.has_rope_freqs = f.find_tensor("rope_freqs.weight") != nullptr;
  c.tied_output = f.find_tensor("output.weight") == nullptr;

  // Vocabulary: the embedding's row count is the truth; metadata must agree.
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) return make_error("{}: missing tensor 'token_embd.weight'", f.path());
  if (emb->n_dims != 2 || emb->ne[0] != c.n_embd)
    return make_error("{}: tensor 'token_embd.weight' has shape {}, expected [{}, n_vocab]", f.path(),
                      emb->shape_string(), c.n_embd);
  if (emb->ne[1] <= 0 || emb->ne[1] > (1 << 24))
    return make_error("{}: tensor 'token_embd.weight' has {} rows", f.path(), emb->ne[1]);
  c.n_vocab = static_cast<int>(emb->ne[1]);
  if (const gguf::Value* toks = f.find("tokenizer.ggml.tokens")) {
    if (toks->size() != static_cast<uint64_t>(c.n_vocab))
      return make_error("{}: tokenizer.ggml.tokens has {} entries but token_embd.weight has {} rows", f.path(),
                        toks->size(), c.n_vocab);
  }
  return c;
}

}  // namespace edgelm
