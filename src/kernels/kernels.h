// The numeric kernels of edgelm: quantized block formats, their scalar
// reference implementations, and SIMD versions chosen once at start by CPU
// feature detection. Every SIMD kernel is tested against the scalar reference.
//
// Conventions: a weight matrix W has `rows` rows of `n` elements each, stored
// in the GGUF layout of its DType (row r at byte r * row_bytes(type, n)).
// Activations are f32 rows of n elements; before an integer dot product they
// are converted to the activation format act_type(weight type).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace edgelm::kernels {

enum class Isa { Scalar, Avx2, Avx512, Neon, AvxVnni };
std::string_view isa_name(Isa isa);
// The instruction sets this CPU runs, best last; always contains Scalar.
const std::vector<Isa>& supported_isas();
Isa best_isa();

// --- element conversions (scalar reference; exact IEEE semantics) ---------
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round to nearest even
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);  // round to nearest even

// --- whole rows (reference) ------------------------------------------------
// dst[0..n) = values of the row; n is a multiple of the type's block size.
// Defined for every type with engine_supported == true.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);
// Quantizes a row into `type`; defined for every engine-supported weight type
// and for the activation types Q8_0, Q8_1 and Q8_K.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

// --- matrix products ---------------------------------------------------------
// Activation format of the integer dot product for a weight type:
// Q4_0/Q5_0/Q8_0 -> Q8_0, Q4_1/Q5_1 -> Q8_1, K-quants -> Q8_K, F32/F16/BF16 -> F32.
DType act_type(DType weight_type);
// Bytes of one activation row of n elements as quantize_activation writes
// it: the act_type blocks and, for Q8_0 and Q8_1 activations, a trailer of
// one int32 per block holding the sum of its quants, from which the
// interleaved kernels remove the offset of the weight format's loaded
// quants (Q4_0's unsigned nibbles 8, x86's packed Q8_0 128). The row depends
// only on act_type(weight_type), so matrices of different formats on the
// same input share it.
size_t act_row_bytes(DType weight_type, int64_t n);
// Converts one f32 row into act_type(weight_type) (a plain copy for F32).
void quantize_activation(Isa isa, DType weight_type, const float* x, void* dst, int64_t n);

// How a weight matrix is laid out in memory.
//   Rows: as in the GGUF file, row after row of blocks.
//   Interleave16: rows regrouped by 16; within a group, block by block, the
//     16 rows' scales followed by their quants ordered so that one 64-byte
//     vector holds four consecutive elements of each of the 16 rows (the order
//     vpdpbusd consumes; NEON's sdot by lane takes each 16 bytes of it as four
//     rows' four elements). A group of 16 rows holds exactly the bytes of those
//     16 rows; the 4- and 5-bit formats store groups in pairs, block by
//     block (one stream of whole cache lines, which decode reads for 32 rows
//     at once), a lone last group padded to a pair. Packed once at load
//     (pack_rows); see pack.cpp for the byte-level layout.
enum class Layout : uint8_t { Rows = 0, Interleave16 = 1 };

struct GemmArgs {
  DType wtype;
  const void* w;      // weight rows
  size_t w_stride;    // bytes between weight rows
  int64_t n;          // elements per row (dot-product length)
  const void* x;      // activation rows in act_type(wtype)
  size_t x_stride;    // bytes between activation rows
  int64_t n_tok;      // activation rows
  float* y;           // y[t * ldy + r]
  int64_t ldy;
  Layout layout = Layout::Rows;  // Interleave16: r0 and r1 are multiples of 16
};
// y[t * ldy + r] = dot(W row r, x row t) for r in [r0, r1), t in [0, n_tok).
// Strides must keep the blocks' natural alignment (2 bytes; 4 for Q8_K and
// f32 rows). Allocates nothing; calls on disjoint row ranges may run
// concurrently (that is how a thread pool splits one product).
void gemm(Isa isa, const GemmArgs& a, int64_t r0, int64_t r1);

// The layout `isa`'s kernels run fastest for a rows x cols matrix of `type`:
// Interleave16 where the ISA has an interleaved kernel for the type (16 rows
// of a block fill a vector, so prefill and batched decode reuse each decoded
// weight vector across tokens without per-block float work), else Rows.
Layout preferred_layout(Isa isa, DType type, int64_t rows, int64_t cols);
// Bytes of a rows x cols matrix of `type` in `layout` (Rows: the file's
// size; Interleave16: the same for the 32-element formats, the 4- and
// 5-bit ones' rows rounded up to 32, the pairs of groups; formats whose
// packed form unpacks scales may take a little more).
size_t packed_bytes(DType type, Layout layout, int64_t rows, int64_t cols);
// Rearranges rows [r0, r1) (multiples of 16) of a GGUF-layout matrix with
// `cols` elements per row into `layout`; dst holds packed_bytes(type,
// layout, rows, cols) for the whole matrix.
void pack_rows(DType type, Layout layout, const void* src, void* dst, int64_t cols, int64_t r0, int64_t r1);
// dst[0..cols) = the values of row r of a packed matrix (an embedding lookup
// in a tied, packed output matrix).
void dequantize_packed_row(DType type, Layout layout, const void* packed, int64_t cols, int64_t r, float* dst);

// --- attention helpers over a KV cache row ----------------------------------
// KV cache rows are F32, F16 or Q8_0 (n a multiple of 32 for Q8_0).
float dot_f32_kv(Isa isa, DType kv_type, const float* q, const void* k, int64_t n);
// y += a * v
void axpy_kv(Isa isa, DType kv_type, float a, const void* v, float* y, int64_t n);
// Stores an f32 row into the KV cache format.
void store_kv(DType kv_type, const float* src, void* dst, int64_t n);

// --- attention tiles ---------------------------------------------------------
// Attention over a block of cached positions for a group of query rows: the
// rows of a block are converted to f32 once, then every query row that
// shares the KV head reads them from cache-resident scratch.
//
// dst[r * n + c] = element c of the KV cache row at src + r * src_stride
// bytes, for r < rows, c < n (F32, F16 or Q8_0 rows): a block of one head's
// keys or values, packed. Exact on every ISA (the values dequantize_row
// gives).
void kv_to_f32(Isa isa, DType kv_type, const void* src, size_t src_stride, int rows, float* dst, int64_t n);
// Requests the bytes [p, p + n) from memory, a cache line at a time, into
// L1: a hint, which never faults. The same request as the F16 tiles' `ahead`
// rows (an asm statement, which the compiler cannot drop as it dropped a
// loop of __builtin_prefetch).
void request_bytes(const void* p, size_t n);
// s[i * lds + j] = dot(q + i * d, k + j * d) for i < nq, j < nk: the scores
// of nq query rows against nk key rows, all d floats, packed. A score's
// rounding depends only on its two rows, never on nq, nk or i, j (a query
// row gets the same scores whatever tile it is computed in).
void attn_scores(Isa isa, const float* q, int nq, const float* k, int nk, int64_t d, float* s, int64_t lds);
// o[i * d + c] += sum over j < nk (in increasing j) of p[i * ldp + j] * v[j * d + c],
// for i < nq, c < d: the probability-weighted values added to nq
// accumulator rows. As for the scores, an element's rounding depends only
// on its own row of p.
void attn_accumulate(Isa isa, const float* p, int64_t ldp, int nq, const float* v, int nk, int64_t d, float* o);
// The same two with the keys (values) as F16 cache rows, k + j * d halves,
// read in place: the same bits as kv_to_f32 followed by the f32 kernel on
// the same ISA (the conversion is exact), without the f32 copy's write and
// re-read. Decode at depth streams a head's rows from memory once: `ahead`
// (if not null) is where the caller reads next, rows at the same stride,
// n_ahead of them. The kernel requests them from memory as it goes, row j
// of `ahead` beside its own row j. A hint: results never depend on it.
void attn_scores_f16(Isa isa, const float* q, int nq, const uint16_t* k, int nk, int64_t d,
                     float* s, int64_t lds, const uint16_t* ahead = nullptr, int n_ahead = 0);
void attn_accumulate_f16(Isa isa, const float* p, int64_t ldp, int nq, const uint16_t* v, int nk,
                         int64_t d, float* o, const uint16_t* ahead = nullptr, int n_ahead = 0);
// s[j] = exp(s[j] - m) for j < n, where every s[j] <= m; returns the sum of
// the new s[j]. The SIMD paths evaluate exp by a polynomial within a few
// ulp of std::exp (the reference), and flush results below 2^-126 to zero.
float attn_exp_sum(Isa isa, float* s, int n, float m);
// The largest of s[0], ..., s[n - 1] (-inf when n is 0): a block's running
// max for the online softmax. Exact, so every ISA returns the reference's
// value; with a NaN among the scores the result is unspecified.
float attn_max(Isa isa, const float* s, int n);

// --- element-wise ------------------------------------------------------------
// The float work between the matrix products, one row at a time (the
// caller spreads rows over threads). The scalar paths are the reference;
// the SIMD ones agree to a few ulp (their exp is attn_exp_sum's polynomial,
// their sums run in several float lanes).
//
// g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i]: the gated
// feed-forward's activation.
void silu_mul(Isa isa, float* g, const float* u, int64_t n);
// y = x / sqrt(mean(x^2) + eps) * w over n elements (w null: no gain); y may be x.
void rms_norm(Isa isa, const float* x, const float* w, float* y, int64_t n, float eps);
// Rotary position embedding of one token's `n_heads` heads of `head_dim`
// floats: in each head, the pairs of the first rope_dim dims are rotated by
// the angle of their pair, whose cosine and sine `table` holds. NeoX pairs
// dim i with i + rope_dim/2, and `table` is the rope_dim/2 cosines then the
// rope_dim/2 sines; the original layout pairs 2i with 2i+1, and `table` is
// cos_i, sin_i pair by pair (rope_table_entry fills either). Dims past
// rope_dim are left as they are.
void rope(Isa isa, float* x, int n_heads, int head_dim, const float* table, int rope_dim, bool neox);
// Writes pair i's cosine and sine where `rope` looks for them.
inline void rope_table_entry(float* table, int rope_dim, bool neox, int i, float c, float s) {
  if (neox) {
    table[i] = c;
    table[rope_dim / 2 + i] = s;
  } else {
    table[2 * i] = c;
    table[2 * i + 1] = s;
  }
}

}  // namespace edgelm::kernels
