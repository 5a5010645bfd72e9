// Model hyper-parameters read from GGUF metadata, for the llama, qwen2 and
// qwen3 families. The families differ only by flags here (QKV bias, per-head
// Q/K norm, RoPE frequency factors), never by a second forward pass.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "gguf/gguf.h"

namespace edgelm {

enum class Arch { Llama, Qwen2, Qwen3 };

enum class RopeScaling { None, Linear, Yarn };

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;  // general.architecture as written
  std::string name;       // general.name, if any

  int n_layers = 0;     // transformer blocks
  int n_embd = 0;       // residual width
  int n_heads = 0;      // query heads
  int n_kv_heads = 0;   // key/value heads (grouped-query attention when < n_heads)
  int head_dim = 0;     // per-head width of Q and K
  int head_dim_v = 0;   // per-head width of V
  int n_ff = 0;         // feed-forward hidden width
  int n_ctx_train = 0;  // context length the model was trained for
  int n_vocab = 0;

  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  int rope_dim = 0;  // leading dims of each head that are rotated (usually head_dim)
  RopeScaling rope_scaling = RopeScaling::None;
  float rope_scale = 1.0f;  // linear: positions are divided by this factor
  bool rope_neox = false;   // rotate pairs (i, i + rope_dim/2) instead of (2i, 2i+1)
  bool has_rope_freqs = false;  // Llama 3.x: rope_freqs.weight divides each frequency

  bool qkv_bias = false;   // qwen2: attn_{q,k,v}.bias
  bool qk_norm = false;    // qwen3: per-head RMS norm of Q and K
  bool tied_output = false;  // no output.weight: logits use token_embd.weight

  int q_dim() const { return n_heads * head_dim; }
  int k_dim() const { return n_kv_heads * head_dim; }
  int v_dim() const { return n_kv_heads * head_dim_v; }
  int attn_out_dim() const { return n_heads * head_dim_v; }
};

std::string_view arch_label(Arch a);

// Reads and validates the metadata; errors name the missing or bad key.
// Tensor shapes are checked when the weights are bound (model/weights.h).
Result<ModelConfig> load_config(const gguf::File& f);

}  // namespace edgelm
