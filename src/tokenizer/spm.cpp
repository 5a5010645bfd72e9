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

}  // namespace

void spm_encode(const Tokenizer::Impl& v, std::string_view text, EncodeScratch& s, std::vector<int32_t>& out) {
  if (text.empty()) return;
  auto& sym = s.symbols;
  auto& heap = s.heap;
  sym.clear();
  // One symbol per character; each byte of malformed UTF-8 is a symbol of its
  // own, so byte fallback gives it back unchanged.
  // When the vocab allows it (see Impl::spm_word_segments), a U+2581 that
  // follows another character starts an independent segment: no token can
  // span that point, so merging segment by segment gives the same result
  // with small, cache-friendly heaps.
  std::vector<int32_t> seg_starts{0};
  bool prev_is_space = false;
  for (size_t off = 0; off < text.size();) {
    const size_t len = utf8_symbol_len(text, off);
    const bool is_space = text.substr(off, len) == kSpmSpace;
    const auto idx = static_cast<int32_t>(sym.size());
    if (v.spm_word_segments && is_space && idx > 0 && !prev_is_space) {
      seg_starts.push_back(idx);
      sym.back().next = -1;
    }
    const bool seg_start = seg_starts.back() == idx;
    sym.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(len), seg_start ? -1 : idx - 1,
                   off + len == text.size() ? -1 : idx + 1, kNoToken, kNoToken, kNoToken});
    prev_is_space = is_space;
    off += len;
  }

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

  seg_starts.push_back(static_cast<int32_t>(sym.size()));
  for (size_t seg = 0; seg + 1 < seg_starts.size(); ++seg) {
    const int32_t first = seg_starts[seg], end = seg_starts[seg + 1];
    heap.clear();
    for (int32_t i = first; i < end; ++i) update(i);
    std::make_heap(heap.begin(), heap.end(), std::greater<>{});  // O(n), not n pushes

    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
      const uint64_t key = heap.back();
      heap.pop_back();
      const auto li = static_cast<int32_t>(key & 0xFFFFFFFFu);
      auto& l = sym[li];
      // Stale unless the pair at `li` still has a candidate with this key
      // (an equal key means an equal score: the order is the same).
      if (l.len == 0 || l.cand == kNoToken || score_key(v.scores[l.cand]) != (key >> 32)) continue;
      auto& r = sym[l.next];
      l.len += r.len;
      l.id = l.cand;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = li;
      if (update(l.prev)) std::push_heap(heap.begin(), heap.end(), std::greater<>{});
      if (update(li)) std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }

    for (int32_t i = first; i != -1; i = sym[i].next) {
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
}

}  // namespace edgelm::tokenizer
