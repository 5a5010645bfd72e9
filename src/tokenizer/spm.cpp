// SentencePiece-style tokenization (llama.cpp's "SPM" vocab type).
//
// Start from one symbol per UTF-8 character; repeatedly join the adjacent
// pair whose joined text is the vocab token with the highest score (ties: the
// leftmost pair). A heap of candidate pairs makes this O(n log n): each join
// creates at most two new candidates, and stale ones are dropped when popped.
// Symbols that never became a token fall back to <0xXX> byte tokens, or <unk>.
#include <algorithm>
#include <bit>
#include <functional>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace edgelm::tokenizer {
namespace {

// Maps a score to a key that sorts ascending as the score descends, so a
// min-heap of (key << 32 | left) pops the best score, then the leftmost pair.
uint32_t score_key(float score) {
  if (score == 0.0f) score = 0.0f;  // -0 ties with +0
  uint32_t u = std::bit_cast<uint32_t>(score);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // monotonic in the score
  return ~u;
}

// Merges the symbols in s.symbols (one segment, a chain from index 0) and
// appends their tokens to `out`.
void merge_and_emit(const Tokenizer::Impl& v, std::string_view text, EncodeScratch& s,
                    std::vector<int32_t>& out) {
  auto& sym = s.symbols;
  auto& heap = s.heap;
  // Sets the candidate of pair (l, next of l); true if there is one.
  auto update = [&](int32_t l) {
    if (l < 0) return false;
    auto& x = sym[l];
    x.cand = kNoToken;
    if (x.next < 0) return false;
    // The two symbols are adjacent in `text`.
    x.cand = v.lookup(text.substr(x.start, x.len + sym[x.next].len));
    if (x.cand == kNoToken) return false;
    heap.push_back((static_cast<uint64_t>(score_key(v.scores[x.cand])) << 32) | static_cast<uint32_t>(l));
    return true;
  };

  // Stale unless the pair at `l` still has a candidate with this key (an
  // equal key means an equal score: the order is the same).
  merge_pairs(
      s, update,
      [&](const EncodeScratch::Symbol& l, uint64_t key) {
        return l.cand != kNoToken && score_key(v.scores[l.cand]) == (key >> 32);
      },
      [](const EncodeScratch::Symbol& l) { return l.cand; });

  for (int32_t i = 0; i != -1; i = sym[i].next) {
    const auto& x = sym[i];
    const std::string_view piece = text.substr(x.start, x.len);
    const int32_t id = x.id != kNoToken ? x.id : v.lookup(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    bool any_unknown = false;
    for (char c : piece) {
      const int32_t bt = v.byte_fallback_token[static_cast<uint8_t>(c)];
      if (bt != kNoToken) {
        out.push_back(bt);
      } else if (!any_unknown && v.unk != kNoToken) {
        out.push_back(v.unk);  // one <unk> per unknown character, as SentencePiece
        any_unknown = true;
      }
    }
  }
}

}  // namespace

void spm_encode(const Tokenizer::Impl& v, std::string_view text, EncodeScratch& s,
                std::vector<int32_t>& out) {
  auto& sym = s.symbols;
  // When the vocab allows it (see Impl::spm_word_segments), a U+2581 that
  // follows another character starts an independent segment: no token can
  // span that point, so merging segment by segment gives the same result
  // with small, cache-friendly heaps, and the symbols of one segment at a
  // time (a long text's would take 28 bytes a character).
  for (size_t off = 0; off < text.size();) {
    // One symbol per character; each byte of malformed UTF-8 is a symbol of
    // its own, so byte fallback gives it back unchanged.
    sym.clear();
    bool prev_is_space = false;
    while (off < text.size()) {
      const size_t len = utf8_symbol_len(text, off);
      const bool is_space = text.substr(off, len) == kSpmSpace;
      if (v.spm_word_segments && is_space && !sym.empty() && !prev_is_space) break;
      const auto idx = static_cast<int32_t>(sym.size());
      sym.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(len), idx - 1, idx + 1,
                     kNoToken, kNoToken, kNoToken});
      prev_is_space = is_space;
      off += len;
    }
    sym.back().next = -1;
    merge_and_emit(v, text, s, out);
  }
}

}  // namespace edgelm::tokenizer
