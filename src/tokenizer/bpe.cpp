// Byte-level BPE (llama.cpp's "BPE" vocab type, tokenizer.ggml.model "gpt2").
//
// The fragment is cut into words by the pre-tokenizer regexes; each word
// starts as one symbol per byte (drawn in the GPT-2 alphabet) and the
// adjacent pair with the lowest merge rank is joined until no rule applies
// (ties: the leftmost pair). Rules are looked up by the pair of token ids, so
// a join costs one hash probe and no string building; a min-heap of
// candidates makes a word O(k log k) in its length k.
#include <algorithm>
#include <functional>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace edgelm::tokenizer {
namespace {

void merge_word(const Tokenizer::Impl& v, std::string_view word, EncodeScratch& s, std::vector<int32_t>& out) {
  auto& sym = s.symbols;
  auto& heap = s.heap;
  sym.clear();
  for (size_t off = 0; off < word.size();) {
    size_t len;
    int32_t id;
    if (v.pre.byte_encode) {
      len = 1;
      id = v.byte_char_token[static_cast<uint8_t>(word[off])];
    } else {
      len = utf8_symbol_len(word, off);
      id = v.lookup(word.substr(off, len));
    }
    const auto idx = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(len), idx - 1,
                   off + len == word.size() ? -1 : idx + 1, id, -1, kNoToken});
    off += len;
  }
  // Sets the candidate of pair (l, next of l); true if there is one. Heap
  // keys are (rank << 32 | l): lowest rank first, then the leftmost pair.
  auto update = [&](int32_t l) {
    if (l < 0) return false;
    auto& x = sym[l];
    x.cand = -1;
    if (x.next < 0 || x.id == kNoToken || sym[x.next].id == kNoToken) return false;
    auto it = v.merges.find(pair_key(x.id, sym[x.next].id));
    if (it == v.merges.end()) return false;
    x.cand = it->second.rank;
    x.cand_result = it->second.result;
    heap.push_back((static_cast<uint64_t>(x.cand) << 32) | static_cast<uint32_t>(l));
    return true;
  };
  // Stale unless the pair at `l` still has a rule of this rank (an equal
  // key sorts identically, so taking it now keeps the order exact).
  merge_pairs(
      s, update,
      [](const EncodeScratch::Symbol& l, uint64_t key) {
        return l.cand >= 0 && static_cast<uint64_t>(l.cand) == (key >> 32);
      },
      [](const EncodeScratch::Symbol& l) { return l.cand_result; });

  for (int32_t i = 0; i != -1; i = sym[i].next) {
    const auto& x = sym[i];
    if (x.id != kNoToken) {
      out.push_back(x.id);
      continue;
    }
    // A character with no token of its own: <0xXX> tokens if the vocab has
    // them (raw UTF-8 BPE), else it is dropped, as llama.cpp does. (Not
    // <unk>: GPT-2-style vocabs often name <|endoftext|> as their unknown token.)
    for (char ch : word.substr(x.start, x.len)) {
      const int32_t bt = v.byte_fallback_token[static_cast<uint8_t>(ch)];
      if (bt != kNoToken) out.push_back(bt);
    }
  }
}

}  // namespace

void bpe_encode(const Tokenizer::Impl& v, std::string_view text, EncodeScratch& s, std::vector<int32_t>& out) {
  if (text.empty()) return;
  // Malformed UTF-8 becomes U+FFFD first, as in llama.cpp (and PCRE2 needs
  // valid UTF-8). Escaping spaces (Gemma 4) happens before the regex split.
  if (!utf8_is_valid(text) || v.pre.escape_whitespace) {
    std::string clean;
    utf8_sanitize_append(clean, text);
    if (v.pre.escape_whitespace) {
      s.text.clear();
      for (char c : clean) {
        if (c == ' ')
          s.text.append(kSpmSpace);
        else
          s.text.push_back(c);
      }
    } else {
      s.text = std::move(clean);
    }
    text = s.text;
  }

  s.words.clear();
  v.splitter->split(text, s.words);

  for (const ByteRange& w : s.words) {
    const std::string_view word = text.substr(w.begin, w.end - w.begin);
    if (v.pre.ignore_merges) {
      // Llama 3 / Tekken: a word that is a token is taken whole, even if the
      // merge rules would not build it.
      std::string_view drawn = word;
      if (v.pre.byte_encode) {
        s.mapped.clear();
        for (char c : word) s.mapped.append(byte_to_unicode(static_cast<uint8_t>(c)));
        drawn = s.mapped;
      }
      const int32_t id = v.lookup(drawn);
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
    }
    if (!v.pre.byte_encode && word.find_first_not_of('\n') == std::string_view::npos) {
      // Gemma 4: a run of newlines has its own tokens that merges miss.
      const int32_t id = v.lookup(word);
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
    }
    merge_word(v, word, s, out);
  }
}

}  // namespace edgelm::tokenizer
