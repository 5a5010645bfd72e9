// Internal: the immutable tables behind a Tokenizer, and the two merge
// algorithms that work on them. Not part of the public API.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace edgelm::tokenizer {

// One BPE merge rule, keyed by the pair of token ids it joins.
struct MergeRule {
  int32_t rank;    // position in tokenizer.ggml.merges: lower merges first
  int32_t result;  // id of the joined text
};

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Tokenizer::Impl {
  VocabKind kind = VocabKind::kSpm;
  std::string model;  // tokenizer.ggml.model
  PreTokenizerSpec pre;
  std::optional<RegexSplitter> splitter;  // BPE only

  // Token table. Texts live in one blob; views into it key `by_text`, so the
  // blob must not change after the map is built (Impl is never moved: it is
  // built in place behind a shared_ptr).
  int32_t n = 0;
  std::string text_blob;
  std::vector<uint32_t> text_off;  // (n + 1): text of i is [text_off[i], text_off[i+1])
  std::vector<float> scores;       // (n)
  std::vector<TokenType> types;    // (n), after llama.cpp's by-text adjustments
  std::vector<uint8_t> strip;      // (n) kLstrip | kRstrip: whitespace eaten beside a special token
  std::unordered_map<std::string_view, int32_t> by_text;  // duplicates: the last id wins

  // Output bytes of each token (Normal, UserDefined, Byte; "" for the rest).
  std::string piece_blob;
  std::vector<uint32_t> piece_off;  // (n + 1)

  // SPM: no token holds a U+2581 right after another character, so text can
  // be merged in independent segments that start at such a U+2581.
  bool spm_word_segments = false;

  // BPE merges by (left id, right id).
  std::unordered_map<uint64_t, MergeRule> merges;
  // Byte-level BPE: id of the one-character token drawing byte b (-1 if none).
  std::array<int32_t, 256> byte_char_token{};
  // Byte fallback: <0xXX> token (SPM also accepts the raw one-byte token).
  std::array<int32_t, 256> byte_fallback_token{};

  int32_t bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken, pad = kNoToken;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  std::vector<int32_t> eog;      // sorted
  std::vector<uint8_t> is_eog;   // (n)

  // Trie over the texts of CONTROL / USER_DEFINED / UNKNOWN tokens, for
  // cutting special tokens out of the text. Node 0 is the root.
  std::vector<int32_t> trie_token;                  // token ending at a node, or -1
  std::unordered_map<uint64_t, int32_t> trie_next;  // (node << 8 | byte) -> node
  std::array<bool, 256> trie_first{};               // bytes that can start a special token

  std::string chat_template;

  static constexpr uint8_t kLstrip = 1, kRstrip = 2;

  std::string_view text(int32_t id) const {
    return std::string_view(text_blob).substr(text_off[id], text_off[id + 1] - text_off[id]);
  }
  std::string_view piece(int32_t id) const {
    return std::string_view(piece_blob).substr(piece_off[id], piece_off[id + 1] - piece_off[id]);
  }
  int32_t lookup(std::string_view s) const {
    auto it = by_text.find(s);
    return it == by_text.end() ? kNoToken : it->second;
  }
};

// Reusable working memory of one encode() call.
struct EncodeScratch {
  struct Symbol {
    uint32_t start, len;  // bytes of the current text; len 0 = merged away
    int32_t prev, next;   // neighbours in the live chain, -1 at the ends
    int32_t id;           // token id of the symbol's text, -1 if unknown yet / none
    // The merge of this symbol with its current right neighbour, kept up to
    // date on every change of the pair (-1: none). Heap entries carry only a
    // (priority, index) key; an entry whose key no longer matches this
    // candidate is stale. SPM: cand = token id of the joined text. BPE: cand
    // = merge rank, cand_result = token id of the joined text.
    int32_t cand, cand_result;
  };
  std::vector<Symbol> symbols;
  std::vector<uint64_t> heap;  // min-heap of (priority << 32 | left index)
  std::string text;     // escaped / sanitized fragment
  std::string mapped;   // a word in the byte-level alphabet
  std::vector<ByteRange> words;
};

// The merge loop both tokenizers share, over s.symbols (one chain from
// index 0): every adjacent pair is offered (update(l) sets symbol l's
// candidate and pushes its heap key; true if there is one), then the best
// pair is joined until none is left. A popped key is stale unless
// current(l, key) says the pair at l still has that candidate; a join gives
// the left symbol the id joined_id(l) and offers its two new pairs.
template <class Update, class Current, class JoinedId>
void merge_pairs(EncodeScratch& s, Update update, Current current, JoinedId joined_id) {
  auto& sym = s.symbols;
  auto& heap = s.heap;
  heap.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(sym.size()); ++i) update(i);
  std::make_heap(heap.begin(), heap.end(), std::greater<>{});  // O(n), not n pushes
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const uint64_t key = heap.back();
    heap.pop_back();
    const auto li = static_cast<int32_t>(key & 0xFFFFFFFFu);
    auto& l = sym[li];
    if (l.len == 0 || !current(l, key)) continue;
    auto& r = sym[l.next];
    l.len += r.len;
    l.id = joined_id(l);
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = li;
    if (update(l.prev)) std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    if (update(li)) std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  }
}

// SentencePiece-style merging of `text` (spaces already U+2581) into ids.
void spm_encode(const Tokenizer::Impl& v, std::string_view text, EncodeScratch& s, std::vector<int32_t>& out);
// Byte-level (or raw UTF-8) BPE of one fragment of plain text.
void bpe_encode(const Tokenizer::Impl& v, std::string_view text, EncodeScratch& s, std::vector<int32_t>& out);

}  // namespace edgelm::tokenizer
