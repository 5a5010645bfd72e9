// A deliberately plain forward pass for tests: weights dequantized to float,
// one token at a time, full softmax attention in double precision, an f32
// cache per sequence. It shares no code with src/model/forward.cpp beyond
// the scalar dequantizer, so it checks the real one's batching, caching,
// GQA, RoPE variants and family flags.
#pragma once

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "model/model.h"

namespace edgelm::test {

class ReferenceModel {
 public:
  explicit ReferenceModel(const Model& m, bool float_activations = false)
      : m_(m), c_(m.config), float_acts(float_activations) {}

  // Feeds one token at the next position; returns its logits.
  std::vector<float> feed(int32_t token) {
    const int E = c_.n_embd, hd = c_.head_dim;
    const int pos = static_cast<int>(n_pos_++);
    std::vector<float> x = row(m_.weights.token_embd, token);
    if (kc_.empty()) {
      kc_.resize(static_cast<size_t>(c_.n_layers));
      vc_.resize(static_cast<size_t>(c_.n_layers));
    }
    for (int l = 0; l < c_.n_layers; ++l) {
      const LayerWeights& L = m_.weights.layers[static_cast<size_t>(l)];
      std::vector<float> h = norm(x, L.attn_norm.f32(), E);
      std::vector<float> q = mul(L.wq, h), k = mul(L.wk, h), v = mul(L.wv, h);
      if (c_.qkv_bias) {
        for (size_t i = 0; i < q.size(); ++i) q[i] += L.bq.f32()[i];
        for (size_t i = 0; i < k.size(); ++i) k[i] += L.bk.f32()[i];
        for (size_t i = 0; i < v.size(); ++i) v[i] += L.bv.f32()[i];
      }
      for (int hh = 0; hh < c_.n_heads; ++hh) {
        if (c_.qk_norm) norm_inplace(q.data() + hh * hd, L.q_norm.f32(), hd);
        rope(q.data() + hh * hd, pos);
      }
      for (int hh = 0; hh < c_.n_kv_heads; ++hh) {
        if (c_.qk_norm) norm_inplace(k.data() + hh * hd, L.k_norm.f32(), hd);
        rope(k.data() + hh * hd, pos);
      }
      kc_[static_cast<size_t>(l)].push_back(k);
      vc_[static_cast<size_t>(l)].push_back(v);
      std::vector<float> att(static_cast<size_t>(c_.attn_out_dim()));
      const int group = c_.n_heads / c_.n_kv_heads;
      for (int hh = 0; hh < c_.n_heads; ++hh) {
        const int kvh = hh / group;
        std::vector<double> s(static_cast<size_t>(pos + 1));
        double mx = -1e300;
        for (int p = 0; p <= pos; ++p) {
          double d = 0;
          for (int i = 0; i < hd; ++i)
            d += static_cast<double>(q[static_cast<size_t>(hh * hd + i)]) * kc_[l][static_cast<size_t>(p)][static_cast<size_t>(kvh * hd + i)];
          s[static_cast<size_t>(p)] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[static_cast<size_t>(p)]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int i = 0; i < c_.head_dim_v; ++i) {
          double a = 0;
          for (int p = 0; p <= pos; ++p)
            a += s[static_cast<size_t>(p)] * vc_[l][static_cast<size_t>(p)][static_cast<size_t>(kvh * c_.head_dim_v + i)];
          att[static_cast<size_t>(hh * c_.head_dim_v + i)] = static_cast<float>(a / sum);
        }
      }
      std::vector<float> o = mul(L.wo, att);
      for (int i = 0; i < E; ++i) x[static_cast<size_t>(i)] += o[static_cast<size_t>(i)];
      h = norm(x, L.ffn_norm.f32(), E);
      std::vector<float> g = mul(L.w_gate, h), u = mul(L.w_up, h);
      for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i]);
      std::vector<float> d = mul(L.w_down, g);
      for (int i = 0; i < E; ++i) x[static_cast<size_t>(i)] += d[static_cast<size_t>(i)];
    }
    return mul(m_.weights.output, norm(x, m_.weights.output_norm.f32(), E));
  }

 private:
  std::vector<float> row(const TensorView& t, int64_t r) const {
    std::vector<float> out(static_cast<size_t>(t.cols));
    kernels::dequantize_row(t.type, t.data + static_cast<size_t>(r) * t.row_bytes, out.data(), t.cols);
    return out;
  }
  // The input as the engine's integer dot product sees it: rounded through
  // the activation format (8-bit blocks) of the weight type.
  std::vector<float> as_activation(DType wtype, const std::vector<float>& in) const {
    const DType at = kernels::act_type(wtype);
    if (at == DType::F32) return in;
    const int64_t n = static_cast<int64_t>(in.size());
    std::vector<uint8_t> q(kernels::act_row_bytes(wtype, n));
    kernels::quantize_row(at, in.data(), q.data(), n);
    std::vector<float> out(in.size());
    const size_t block = at == DType::Q8_K ? 256 : 32;
    const size_t bytes = at == DType::Q8_K ? 292 : at == DType::Q8_1 ? 36 : 34;
    for (size_t b = 0; b < in.size() / block; ++b) {
      const uint8_t* blk = q.data() + b * bytes;
      float d;
      const int8_t* qs;
      if (at == DType::Q8_K) {
        std::memcpy(&d, blk, 4);
        qs = reinterpret_cast<const int8_t*>(blk + 4);
      } else {
        uint16_t h;
        std::memcpy(&h, blk, 2);
        d = kernels::fp16_to_fp32(h);
        qs = reinterpret_cast<const int8_t*>(blk + (at == DType::Q8_1 ? 4 : 2));
      }
      for (size_t i = 0; i < block; ++i) out[b * block + i] = d * static_cast<float>(qs[i]);
    }
    return out;
  }
  std::vector<float> mul(const TensorView& w, const std::vector<float>& in_f32) const {
    const std::vector<float> in = float_acts ? in_f32 : as_activation(w.type, in_f32);
    std::vector<float> out(static_cast<size_t>(w.rows));
    for (int64_t r = 0; r < w.rows; ++r) {
      std::vector<float> wr = row(w, r);
      double d = 0;
      for (int64_t i = 0; i < w.cols; ++i) d += static_cast<double>(wr[static_cast<size_t>(i)]) * in[static_cast<size_t>(i)];
      out[static_cast<size_t>(r)] = static_cast<float>(d);
    }
    return out;
  }
  std::vector<float> norm(const std::vector<float>& x, const float* w, int n) const {
    std::vector<float> y(x);
    norm_inplace(y.data(), w, n);
    return y;
  }
  void norm_inplace(float* x, const float* w, int n) const {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double s = 1.0 / std::sqrt(ss / n + c_.rms_eps);
    for (int i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * s * w[i]);
  }
  void rope(float* v, int pos) const {
    const int half = c_.rope_dim / 2;
    for (int i = 0; i < half; ++i) {
      double freq = std::pow(static_cast<double>(c_.rope_base), -2.0 * i / c_.rope_dim) / c_.rope_scale;
      if (m_.weights.rope_freqs.present()) freq /= m_.weights.rope_freqs.f32()[i];
      const double th = pos * freq;
      const int a = c_.rope_neox ? i : 2 * i, b = c_.rope_neox ? i + half : 2 * i + 1;
      const double x0 = v[a], x1 = v[b];
      v[a] = static_cast<float>(x0 * std::cos(th) - x1 * std::sin(th));
      v[b] = static_cast<float>(x0 * std::sin(th) + x1 * std::cos(th));
    }
  }

  const Model& m_;
  const ModelConfig& c_;
  bool float_acts;  // true: activations stay f32 (no 8-bit rounding)
  size_t n_pos_ = 0;
  std::vector<std::vector<std::vector<float>>> kc_, vc_;  // [layer][pos][dim]
};

}  // namespace edgelm::test
