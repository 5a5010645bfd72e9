#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace edgelm {

std::string_view attn_math_name(AttnMath m) {
  switch (m) {
    case AttnMath::LlamaCpp:
      return "llamacpp";
    case AttnMath::Rows:
      return "rows";
    default:
      return "f32";
  }
}

Result<AttnMath> parse_attn_math(std::string_view name) {
  if (name == "f32") return AttnMath::F32;
  if (name == "llamacpp") return AttnMath::LlamaCpp;
  if (name == "rows") return AttnMath::Rows;
  return make_error("unknown attention math '{}' (f32, llamacpp, rows)", name);
}

Forward::Forward(const ModelConfig& c, const ModelWeights& w, const ScratchLayout& layout, uint8_t* scratch,
                 KvView kv, ThreadPool& pool, kernels::Isa isa, AttnMath attn_math)
    : c_(c),
      w_(w),
      layout_(layout),
      scratch_(scratch),
      kv_(kv),
      pool_(pool),
      isa_(isa),
      attn_math_(attn_math),
      max_tokens_(layout.max_tokens),
      max_logits_(layout.max_logits) {
  // theta_i = pos * base^(-2i/rope_dim), built by repeated multiplication in
  // float as the reference implementation does, so positions agree bit for bit.
  const float theta_scale = std::pow(c.rope_base, -2.0f / static_cast<float>(c.rope_dim));
  float t = 1.0f;
  for (int i = 0; i < c.rope_dim / 2; ++i) {
    float ff = w.rope_freqs.present() ? w.rope_freqs.f32()[i] : 1.0f;
    inv_freq_[i] = t / ff / c.rope_scale;
    t *= theta_scale;
  }
}

void Forward::each_row(int n, int64_t row_elems, FunctionRef<void(int row)> fn) {
  if (n * row_elems * static_cast<int64_t>(sizeof(float)) < kMinParallelWork || pool_.size() <= 1) {
    for (int r = 0; r < n; ++r) fn(r);
    return;
  }
  // Contiguous runs of rows, a few per thread, so a slow core does not hold the rest.
  const int chunks = std::min(n, pool_.size() * 4);
  pool_.run(chunks, [&](int ch, int) {
    const int r0 = static_cast<int>(static_cast<int64_t>(n) * ch / chunks);
    const int r1 = static_cast<int>(static_cast<int64_t>(n) * (ch + 1) / chunks);
    for (int r = r0; r < r1; ++r) fn(r);
  });
}

void Forward::matmuls(std::span<const Product> products, const float* in, int T) {
  constexpr size_t kMaxRun = 4;  // products in one region (3 are used: Q, K, V)
  void* act = scratch_ + layout_.act;
  const size_t act_row = layout_.act_row;
  // Runs of products whose weights take the same activation format (a
  // Q4_K_M file mixes Q4_K and Q6_K, which both take Q8_K rows; a format
  // change quantizes the input again into the same buffer).
  for (size_t i = 0; i < products.size();) {
    const TensorView& w0 = *products[i].w;
    const DType at = kernels::act_type(w0.type);
    size_t j = i + 1;
    while (j < products.size() && j < i + kMaxRun && kernels::act_type(products[j].w->type) == at &&
           products[j].w->cols == w0.cols)
      ++j;

    const int64_t n = w0.cols;
    auto one = [&](int t, int) {
      kernels::quantize_activation(isa_, w0.type, in + static_cast<size_t>(t) * n,
                                   static_cast<uint8_t*>(act) + static_cast<size_t>(t) * act_row, n);
    };
    if (T * n < kMinParallelWork) {
      for (int t = 0; t < T; ++t) one(t, 0);
    } else {
      pool_.run(T, one);
    }

    // The run's rows as one sequence of 32-row units (SIMD kernels that
    // tile rows see whole tiles; the interleaved 32-element formats' pairs
    // of 16-row groups, which decode reads as one stream, stay whole),
    // products in order, handed out guided (ThreadPool::run_guided): the
    // region does not end waiting for one thread's last large chunk.
    constexpr int64_t kUnit = 32;
    kernels::GemmArgs args[kMaxRun];
    int64_t first_unit[kMaxRun + 1];
    const int n_run = static_cast<int>(j - i);
    int64_t work = 0;
    first_unit[0] = 0;
    for (size_t k = i; k < j; ++k) {
      const TensorView& w = *products[k].w;
      kernels::GemmArgs& a = args[k - i];
      a.wtype = w.type;
      a.w = w.data;
      a.w_stride = w.row_bytes;
      a.n = w.cols;
      a.x = act;
      a.x_stride = act_row;
      a.n_tok = T;
      a.y = products[k].out;
      a.ldy = w.rows;
      a.layout = w.layout;
      first_unit[k - i + 1] = first_unit[k - i] + (w.rows + kUnit - 1) / kUnit;
      work += static_cast<int64_t>(w.bytes()) * T;
    }
    // Units [u0, u1) of the run, split where one product ends.
    auto units = [&](int64_t u0, int64_t u1) {
      for (int m = 0; m < n_run && u0 < u1; ++m) {
        if (u0 >= first_unit[m + 1]) continue;
        const int64_t e = std::min(u1, first_unit[m + 1]);
        const int64_t r0 = (u0 - first_unit[m]) * kUnit;
        const int64_t r1 = std::min<int64_t>(args[m].ldy, (e - first_unit[m]) * kUnit);
        if (r0 < r1) kernels::gemm(isa_, args[m], r0, r1);
        u0 = e;
      }
    };
    if (work < kMinParallelWork) {
      units(0, first_unit[n_run]);
    } else {
      pool_.run_guided(first_unit[n_run], [&](int64_t u0, int64_t u1, int) { units(u0, u1); });
    }
    i = j;
  }
}

void Forward::rope(float* x, int T, int n_heads, std::span<const BatchToken>) {
  const int hd = c_.head_dim;
  const float* table = buf<float>(layout_.rope);
  each_row(T, n_heads * hd, [&](int t) {
    kernels::rope(isa_, x + static_cast<size_t>(t) * n_heads * hd, n_heads, hd,
                  table + static_cast<size_t>(t) * c_.rope_dim, c_.rope_dim, c_.rope_neox);
  });
}

void Forward::attention(int layer, std::span<const BatchToken> batch) {
  if (attn_math_ == AttnMath::F32) {
    AttnScratch sc;
    sc.threads = buf<float>(layout_.thread);
    sc.per_thread = layout_.per_thread / sizeof(float);
    sc.splits = buf<float>(layout_.attn_splits);
    sc.runs = buf<int32_t>(layout_.attn_runs);
    attend_tiles(attn_shape(c_), kv_, layer, batch, buf<float>(layout_.q), buf<float>(layout_.att), sc, pool_, isa_);
    return;
  }
  // AttnMath::Rows and LlamaCpp: per (token, query head), per position.
  const int T = static_cast<int>(batch.size());
  const int hd = c_.head_dim, hdv = c_.head_dim_v;
  const int group = c_.n_heads / c_.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* q = buf<float>(layout_.q);
  float* out = buf<float>(layout_.att);

  // One task per (token, query head): an online softmax over the slot's
  // positions [0, pos], in blocks of kAttnBlock scores; memory use is fixed.
  auto head = [&](int task, int thread) {
    const int t = task / c_.n_heads, h = task % c_.n_heads;
    const BatchToken& bt = batch[static_cast<size_t>(t)];
    const int kvh = h / group;
    const float* qh = q + (static_cast<size_t>(t) * c_.n_heads + h) * hd;
    float* acc = buf<float>(layout_.thread + static_cast<size_t>(thread) * layout_.per_thread);
    if (attn_math_ == AttnMath::LlamaCpp) {
      attend_llamacpp(layer, bt, kvh, qh, acc, out + (static_cast<size_t>(t) * c_.n_heads + h) * hdv);
      return;
    }
    float* scores = acc + hdv;
    std::fill(acc, acc + hdv, 0.0f);
    float m = -INFINITY, sum = 0.0f;
    const int n_pos = bt.pos + 1;
    for (int p0 = 0; p0 < n_pos; p0 += kAttnBlock) {
      const int p1 = std::min(n_pos, p0 + kAttnBlock);
      float bm = -INFINITY;
      for (int p = p0; p < p1; ++p) {
        const uint8_t* k = kv_.k(bt.slot, layer, kvh, p);
        const float s = kernels::dot_f32_kv(isa_, kv_.type, qh, k, hd) * scale;
        scores[p - p0] = s;
        bm = std::max(bm, s);
      }
      if (bm > m) {
        const float r = std::exp(m - bm);  // 0 on the first block
        for (int i = 0; i < hdv; ++i) acc[i] *= r;
        sum *= r;
        m = bm;
      }
      for (int p = p0; p < p1; ++p) {
        const float e = std::exp(scores[p - p0] - m);
        sum += e;
        kernels::axpy_kv(isa_, kv_.type, e, kv_.v(bt.slot, layer, kvh, p), acc, hdv);
      }
    }
    float* o = out + (static_cast<size_t>(t) * c_.n_heads + h) * hdv;
    const float inv = 1.0f / sum;
    for (int i = 0; i < hdv; ++i) o[i] = acc[i] * inv;
  };
  int64_t work = 0;
  for (const BatchToken& b : batch) work += static_cast<int64_t>(b.pos + 1) * c_.n_heads * (hd + hdv);
  if (work < kMinParallelWork) {
    for (int task = 0; task < T * c_.n_heads; ++task) head(task, 0);
  } else {
    pool_.run(T * c_.n_heads, head);
  }
}

void Forward::attend_llamacpp(int layer, const BatchToken& bt, int kvh, const float* q, float* work,
                              float* out) const {
  const int hd = c_.head_dim, hdv = c_.head_dim_v;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // work: the running output (hdv floats), then the query as the K cache
  // stores it, read back as f32 (hd floats), then that query's bytes.
  float* acc = work;
  float* qk = work + hdv;
  if (kv_.type == DType::F32) {
    std::copy(q, q + hd, qk);
  } else {
    uint8_t* bytes = reinterpret_cast<uint8_t*>(qk + hd);
    kernels::store_kv(kv_.type, q, bytes, hd);
    kernels::dequantize_row(kv_.type, bytes, qk, hd);
  }
  const bool f16_sum = kv_.type == DType::F16;
  std::fill(acc, acc + hdv, 0.0f);
  float m = -INFINITY, sum = 0.0f;
  for (int p = 0; p <= bt.pos; ++p) {
    const float s = kernels::dot_f32_kv(isa_, kv_.type, qk, kv_.k(bt.slot, layer, kvh, p), hd) * scale;
    float ms = 1.0f, vs = 1.0f;
    if (s > m) {
      ms = std::exp(m - s);  // 0 at the first position
      m = s;
      for (int i = 0; i < hdv; ++i) {
        acc[i] *= ms;
        if (f16_sum) acc[i] = kernels::fp16_to_fp32(kernels::fp32_to_fp16(acc[i]));
      }
    } else {
      vs = std::exp(s - m);
    }
    const uint8_t* v = kv_.v(bt.slot, layer, kvh, p);
    if (f16_sum) {
      const auto* vh = reinterpret_cast<const uint16_t*>(v);
      for (int i = 0; i < hdv; ++i)
        acc[i] = kernels::fp16_to_fp32(kernels::fp32_to_fp16(std::fma(kernels::fp16_to_fp32(vh[i]), vs, acc[i])));
    } else {
      kernels::axpy_kv(isa_, kv_.type, vs, v, acc, hdv);
    }
    sum = sum * ms + vs;
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < hdv; ++i) out[i] = acc[i] * inv;
}

Result<const float*> Forward::step(std::span<const BatchToken> batch) {
  const int T = static_cast<int>(batch.size());
  if (T == 0) return make_error("empty batch");
  if (T > max_tokens_) return make_error("batch of {} tokens exceeds the planned {}", T, max_tokens_);
  int n_logits = 0;
  for (const BatchToken& b : batch) {
    if (b.token < 0 || b.token >= c_.n_vocab) return make_error("token id {} out of range", b.token);
    if (b.slot < 0 || b.slot >= kv_.n_slots) return make_error("slot {} out of range", b.slot);
    if (b.pos < 0 || b.pos >= kv_.ctx) return make_error("position {} outside the slot's {} tokens", b.pos, kv_.ctx);
    n_logits += b.logits ? 1 : 0;
  }
  if (n_logits > max_logits_) return make_error("{} logits rows exceed the planned {}", n_logits, max_logits_);

  const int E = c_.n_embd;
  float* x = buf<float>(layout_.x);
  float* xb = buf<float>(layout_.xb);
  float* q = buf<float>(layout_.q);
  float* k = buf<float>(layout_.k);
  float* v = buf<float>(layout_.v);
  float* att = buf<float>(layout_.att);
  float* gate = buf<float>(layout_.gate);
  float* up = buf<float>(layout_.up);

  // Embedding rows and the RoPE table of this step's positions.
  float* rope_table = buf<float>(layout_.rope);
  for (int t = 0; t < T; ++t) {
    const BatchToken& b = batch[static_cast<size_t>(t)];
    if (w_.token_embd.layout == kernels::Layout::Rows) {
      kernels::dequantize_row(w_.token_embd.type,
                              w_.token_embd.data + static_cast<size_t>(b.token) * w_.token_embd.row_bytes,
                              x + static_cast<size_t>(t) * E, E);
    } else {
      kernels::dequantize_packed_row(w_.token_embd.type, w_.token_embd.layout, w_.token_embd.data, E, b.token,
                                     x + static_cast<size_t>(t) * E);
    }
    float* cs = rope_table + static_cast<size_t>(t) * c_.rope_dim;
    for (int i = 0; i < c_.rope_dim / 2; ++i) {
      const float theta = static_cast<float>(b.pos) * inv_freq_[i];
      kernels::rope_table_entry(cs, c_.rope_dim, c_.rope_neox, i, std::cos(theta), std::sin(theta));
    }
  }

  const int qd = c_.q_dim(), kd = c_.k_dim(), vd = c_.v_dim();
  for (int l = 0; l < c_.n_layers; ++l) {
    const LayerWeights& L = w_.layers[static_cast<size_t>(l)];
    // Layer 0's input norm; every later one is done with the residual add
    // that ends the layer before it.
    if (l == 0) {
      each_row(T, E, [&](int t) {
        kernels::rms_norm(isa_, x + static_cast<size_t>(t) * E, L.attn_norm.f32(), xb + static_cast<size_t>(t) * E, E,
                          c_.rms_eps);
      });
    }
    {
      const Product qkv[] = {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}};
      matmuls(qkv, xb, T);
    }
    if (c_.qkv_bias) {
      for (int t = 0; t < T; ++t) {
        for (int i = 0; i < qd; ++i) q[static_cast<size_t>(t) * qd + i] += L.bq.f32()[i];
        for (int i = 0; i < kd; ++i) k[static_cast<size_t>(t) * kd + i] += L.bk.f32()[i];
        for (int i = 0; i < vd; ++i) v[static_cast<size_t>(t) * vd + i] += L.bv.f32()[i];
      }
    }
    if (c_.qk_norm) {
      const int hd = c_.head_dim;
      each_row(T * c_.n_heads, hd, [&](int r) {
        float* row = q + static_cast<size_t>(r) * hd;
        kernels::rms_norm(isa_, row, L.q_norm.f32(), row, hd, c_.rms_eps);
      });
      each_row(T * c_.n_kv_heads, hd, [&](int r) {
        float* row = k + static_cast<size_t>(r) * hd;
        kernels::rms_norm(isa_, row, L.k_norm.f32(), row, hd, c_.rms_eps);
      });
    }
    rope(q, T, c_.n_heads, batch);
    rope(k, T, c_.n_kv_heads, batch);
    // This step's keys and values go into the cache first, so a token sees
    // the tokens before it in the same step.
    for (int t = 0; t < T; ++t) {
      const BatchToken& b = batch[static_cast<size_t>(t)];
      kv_.store(b.slot, l, b.pos, k + static_cast<size_t>(t) * kd, c_.head_dim, v + static_cast<size_t>(t) * vd,
                c_.head_dim_v);
    }
    attention(l, batch);
    // The residual add reuses `xb` for the projection output; the add and the
    // next norm go row by row, while a token's row is in cache.
    const LayerWeights* next = l + 1 < c_.n_layers ? &w_.layers[static_cast<size_t>(l) + 1] : nullptr;
    auto add_norm = [&](const TensorView* norm) {
      each_row(T, E, [&](int t) {
        float* xt = x + static_cast<size_t>(t) * E;
        float* bt = xb + static_cast<size_t>(t) * E;
        for (int i = 0; i < E; ++i) xt[i] += bt[i];
        if (norm) kernels::rms_norm(isa_, xt, norm->f32(), bt, E, c_.rms_eps);
      });
    };
    matmul(L.wo, att, T, xb);
    add_norm(&L.ffn_norm);
    {
      const Product gate_up[] = {{&L.w_gate, gate}, {&L.w_up, up}};
      matmuls(gate_up, xb, T);
    }
    const int nff = c_.n_ff;
    each_row(T, nff, [&](int t) {  // SiLU(gate) * up
      const size_t o = static_cast<size_t>(t) * nff;
      kernels::silu_mul(isa_, gate + o, up + o, nff);
    });
    matmul(L.w_down, gate, T, xb);
    add_norm(next ? &next->attn_norm : nullptr);
  }

  // Logits only for the rows that are sampled.
  float* last = buf<float>(layout_.last);
  int r = 0;
  for (int t = 0; t < T; ++t) {
    if (!batch[static_cast<size_t>(t)].logits) continue;
    kernels::rms_norm(isa_, x + static_cast<size_t>(t) * E, w_.output_norm.f32(), last + static_cast<size_t>(r) * E, E,
                      c_.rms_eps);
    ++r;
  }
  float* logits = buf<float>(layout_.logits);
  if (r > 0) matmul(w_.output, last, r, logits);
  return static_cast<const float*>(logits);
}

}  // namespace edgelm
