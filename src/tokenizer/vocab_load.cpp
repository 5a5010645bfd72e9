// Tokenizer::from_gguf: tokenizer.ggml.* metadata -> immutable tables.
//
// Every array and id is checked before use; bad data is an Error naming the
// key. Beyond the metadata, the by-text rules of llama.cpp are applied so the
// same file tokenizes and stops the same way: tokens that look like
// end-of-turn markers become CONTROL and end-of-generation, Phi-3's special
// tokens eat the whitespace after them, and so on.
#include <algorithm>
#include <cctype>
#include <string>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace edgelm::tokenizer {
namespace {

using Impl = Tokenizer::Impl;

constexpr std::string_view kKeyModel = "tokenizer.ggml.model";
constexpr std::string_view kKeyPre = "tokenizer.ggml.pre";
constexpr std::string_view kKeyTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kKeyScores = "tokenizer.ggml.scores";
constexpr std::string_view kKeyTypes = "tokenizer.ggml.token_type";
constexpr std::string_view kKeyMerges = "tokenizer.ggml.merges";

bool is_int_type(gguf::ValueType t) {
  using VT = gguf::ValueType;
  return t == VT::U8 || t == VT::I8 || t == VT::U16 || t == VT::I16 || t == VT::U32 || t == VT::I32 ||
         t == VT::U64 || t == VT::I64;
}

Result<bool> optional_bool(const gguf::File& f, std::string_view key, bool dflt) {
  if (!f.find(key)) return dflt;
  return f.get_bool(key);
}

// A special-token id: absent -> unchanged; -1 (or u32 0xFFFFFFFF) -> none;
// anything else must be a token id.
Status read_special_id(const gguf::File& f, std::string_view key, int32_t n, int32_t& id) {
  const gguf::Value* v = f.find(key);
  if (!v) return Status::Ok();
  auto x = v->as_int();
  if (!x) return make_error("{}: {} is {}, expected an integer token id", f.path(), key, gguf::value_type_name(v->type()));
  if (*x == -1 || *x == 0xFFFFFFFFll) {
    id = kNoToken;
    return Status::Ok();
  }
  if (*x < 0 || *x >= n) return make_error("{}: {} = {} is outside the vocab (0..{})", f.path(), key, *x, n - 1);
  id = static_cast<int32_t>(*x);
  return Status::Ok();
}

Status load_tokens(const gguf::File& f, Impl& v) {
  const gguf::Value* toks = f.find(kKeyTokens);
  if (!toks) return make_error("{}: missing {} (no vocabulary in this file)", f.path(), kKeyTokens);
  if (!toks->is_array() || toks->elem_type() != gguf::ValueType::STRING)
    return make_error("{}: {} must be an array of strings", f.path(), kKeyTokens);
  if (toks->size() == 0) return make_error("{}: {} is empty", f.path(), kKeyTokens);
  if (toks->size() >= (1u << 30)) return make_error("{}: {} has {} entries, too many", f.path(), kKeyTokens, toks->size());
  v.n = static_cast<int32_t>(toks->size());
  const auto n = static_cast<uint64_t>(v.n);

  const gguf::Value* scores = f.find(kKeyScores);
  if (scores) {
    if (!scores->is_array() || !(scores->elem_type() == gguf::ValueType::F32 ||
                                 scores->elem_type() == gguf::ValueType::F64 || is_int_type(scores->elem_type())))
      return make_error("{}: {} must be an array of numbers", f.path(), kKeyScores);
    if (scores->size() != n)
      return make_error("{}: {} has {} entries but {} has {}", f.path(), kKeyScores, scores->size(), kKeyTokens, n);
  }
  const gguf::Value* types = f.find(kKeyTypes);
  if (types) {
    if (!types->is_array() || !is_int_type(types->elem_type()))
      return make_error("{}: {} must be an array of integers", f.path(), kKeyTypes);
    if (types->size() != n)
      return make_error("{}: {} has {} entries but {} has {}", f.path(), kKeyTypes, types->size(), kKeyTokens, n);
  }

  v.text_off.reserve(n + 1);
  v.scores.resize(n, 0.0f);
  v.types.resize(n, TokenType::kNormal);
  v.strip.resize(n, 0);
  v.text_off.push_back(0);
  for (uint64_t i = 0; i < n; ++i) {
    std::string_view t = *toks->string_at(i);
    if (v.text_blob.size() + t.size() >= (1ull << 32))
      return make_error("{}: {} holds more than 4 GiB of text", f.path(), kKeyTokens);
    v.text_blob.append(t);
    v.text_off.push_back(static_cast<uint32_t>(v.text_blob.size()));
    if (scores) v.scores[i] = static_cast<float>(*scores->float_at(i));
    if (types) {
      const int64_t ty = *types->int_at(i);
      if (ty < 0 || ty > 6) return make_error("{}: {}[{}] = {} is not a token type (0..6)", f.path(), kKeyTypes, i, ty);
      v.types[i] = static_cast<TokenType>(ty);
    }
  }
  // Views into the finished blob. An empty text can never be matched, so it
  // stays out of the map (llama.cpp renames it "[EMPTY_i]" for the same end).
  v.by_text.reserve(n);
  for (int32_t i = 0; i < v.n; ++i)
    if (!v.text(i).empty()) v.by_text[v.text(i)] = i;
  return Status::Ok();
}

Status load_merges(const gguf::File& f, Impl& v) {
  const gguf::Value* m = f.find(kKeyMerges);
  if (!m) return make_error("{}: missing {} (a BPE vocab needs merge rules)", f.path(), kKeyMerges);
  if (!m->is_array() || m->elem_type() != gguf::ValueType::STRING)
    return make_error("{}: {} must be an array of strings", f.path(), kKeyMerges);
  if (m->size() >= (1u << 30)) return make_error("{}: {} has too many entries", f.path(), kKeyMerges);
  v.merges.reserve(m->size());
  std::string joined;
  for (uint64_t i = 0; i < m->size(); ++i) {
    std::string_view rule = *m->string_at(i);
    // "left right"; the left part may itself start with a space.
    const size_t sp = rule.size() > 1 ? rule.find(' ', 1) : std::string_view::npos;
    if (sp == std::string_view::npos)
      return make_error("{}: {}[{}] = \"{}\" is not two tokens separated by a space", f.path(), kKeyMerges, i, rule);
    const std::string_view a = rule.substr(0, sp), b = rule.substr(sp + 1);
    joined.assign(a);
    joined.append(b);
    const int32_t ia = v.lookup(a), ib = v.lookup(b), ij = v.lookup(joined);
    // A rule whose parts or result are not tokens could only produce text
    // with no id; such rules are skipped.
    if (ia == kNoToken || ib == kNoToken || ij == kNoToken) continue;
    v.merges.emplace(pair_key(ia, ib), MergeRule{static_cast<int32_t>(i), ij});  // first (lowest rank) wins
  }
  return Status::Ok();
}

int byte_of_hex_token(std::string_view t) {
  // "<0xAB>"
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// True when no token contains a U+2581 directly after a character other than
// U+2581 (characters stepped as spm_encode steps them). Then no merge can
// cross such a point of the text.
bool spm_segments_safe(const Impl& v) {
  for (int32_t i = 0; i < v.n; ++i) {
    const std::string_view t = v.text(i);
    bool prev_other = false;
    for (size_t k = 0; k < t.size();) {
      const size_t len = utf8_symbol_len(t, k);
      const bool space = t.substr(k, len) == kSpmSpace;
      if (space && prev_other) return false;
      prev_other = !space;
      k += len;
    }
  }
  return true;
}

void build_byte_tables(Impl& v) {
  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = v.lookup(std::string_view(name, 6));
    if (id == kNoToken && v.kind == VocabKind::kSpm) {
      const char raw = static_cast<char>(b);
      id = v.lookup(std::string_view(&raw, 1));
    }
    v.byte_fallback_token[b] = id;
    v.byte_char_token[b] = v.lookup(byte_to_unicode(static_cast<uint8_t>(b)));
  }
}

// Output bytes of every token, computed once (like llama.cpp's piece cache).
void build_pieces(Impl& v) {
  v.piece_off.reserve(v.n + 1);
  v.piece_off.push_back(0);
  for (int32_t i = 0; i < v.n; ++i) {
    const std::string_view t = v.text(i);
    switch (v.types[i]) {
      case TokenType::kUserDefined: v.piece_blob.append(t); break;
      case TokenType::kByte: {
        const int b = byte_of_hex_token(t);
        if (b >= 0)
          v.piece_blob.push_back(static_cast<char>(b));
        else
          v.piece_blob.append(t);
        break;
      }
      case TokenType::kNormal:
        if (v.kind == VocabKind::kSpm || v.pre.escape_whitespace) {
          for (size_t k = 0; k < t.size();) {
            if (t.substr(k, 3) == kSpmSpace) {
              v.piece_blob.push_back(' ');
              k += 3;
            } else {
              v.piece_blob.push_back(t[k++]);
            }
          }
        } else {
          // Byte-level: each code point of the GPT-2 alphabet is one byte;
          // anything else (malformed vocab) passes through as UTF-8.
          for (size_t k = 0; k < t.size();) {
            const Utf8Char c = utf8_decode(t, k);
            const int b = c.valid ? unicode_to_byte(c.cp) : -1;
            if (b >= 0)
              v.piece_blob.push_back(static_cast<char>(b));
            else
              v.piece_blob.append(t.substr(k, c.len));
            k += c.len;
          }
        }
        break;
      default: break;  // CONTROL/UNKNOWN render their text only on request; UNUSED/UNDEFINED nothing
    }
    v.piece_off.push_back(static_cast<uint32_t>(v.piece_blob.size()));
  }
}

// llama.cpp's by-text rules for end-of-generation and FIM tokens.
struct TextRules {
  std::vector<std::string_view> eot = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                       "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                       "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
                                       "<end_of_utterance>"};
  std::vector<std::string_view> eom = {"<|eom_id|>"};
  std::vector<std::string_view> fim_pre = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xE2\x96\x81<PRE>",
                                           "<|code_prefix|>", "<|prefix|>"};
  std::vector<std::string_view> fim_suf = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xE2\x96\x81<SUF>",
                                           "<|code_suffix|>", "<|suffix|>"};
  std::vector<std::string_view> fim_mid = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xE2\x96\x81<MID>",
                                           "<|code_middle|>", "<|middle|>"};
  std::vector<std::string_view> fim_pad = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
  std::vector<std::string_view> fim_rep = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
  std::vector<std::string_view> fim_sep = {"<|file_sep|>"};
  std::vector<std::string_view> eog = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                                       "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                                       "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                                       "<turn|>", "<|tool_response>",
                                       "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
                                       "[e~["};
};

// First token of `names` (in the list's order of preference) present in the vocab.
int32_t find_first(const Impl& v, const std::vector<std::string_view>& names) {
  for (std::string_view s : names)
    if (int32_t id = v.lookup(s); id != kNoToken) return id;
  return kNoToken;
}

void make_control(Impl& v, int32_t id) {
  if (id != kNoToken) v.types[id] = TokenType::kControl;
}

Status load_specials(const gguf::File& f, Impl& v) {
  if (v.kind == VocabKind::kSpm) {
    // llama.cpp's defaults for SentencePiece vocabs, when they exist.
    v.bos = v.n > 1 ? 1 : kNoToken;
    v.eos = v.n > 2 ? 2 : kNoToken;
    v.unk = 0;
  }
  int32_t fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;
  int32_t fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken;
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.bos_token_id", v.n, v.bos));
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.eos_token_id", v.n, v.eos));
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.eot_token_id", v.n, v.eot));
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.eom_token_id", v.n, v.eom));
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.unknown_token_id", v.n, v.unk));
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.padding_token_id", v.n, v.pad));
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.fim_pre_token_id", v.n, fim_pre));
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.fim_suf_token_id", v.n, fim_suf));
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.fim_mid_token_id", v.n, fim_mid));
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.fim_pad_token_id", v.n, fim_pad));
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.fim_rep_token_id", v.n, fim_rep));
  EDGELM_TRY(read_special_id(f, "tokenizer.ggml.fim_sep_token_id", v.n, fim_sep));

  bool add_bos = v.kind == VocabKind::kSpm || v.pre.add_bos;
  EDGELM_ASSIGN(add_bos, optional_bool(f, "tokenizer.ggml.add_bos_token", add_bos));
  if (v.pre.name == "gemma4") add_bos = true;  // llama.cpp overrides it for Gemma 4
  EDGELM_ASSIGN(v.add_eos, optional_bool(f, "tokenizer.ggml.add_eos_token", false));
  EDGELM_ASSIGN(v.add_space_prefix,
                optional_bool(f, "tokenizer.ggml.add_space_prefix", v.kind == VocabKind::kSpm));
  v.add_bos = add_bos && v.bos != kNoToken;
  v.add_eos = v.add_eos && v.eos != kNoToken;

  // Tokens recognised by their text when the metadata does not name them.
  // Each one found becomes CONTROL (a model bug llama.cpp also corrects).
  const TextRules rules;
  auto by_rule = [&](int32_t& id, const std::vector<std::string_view>& names) {
    if (id != kNoToken) return;
    id = find_first(v, names);
    make_control(v, id);
  };
  by_rule(v.eot, rules.eot);
  by_rule(v.eom, rules.eom);
  by_rule(fim_pre, rules.fim_pre);
  by_rule(fim_suf, rules.fim_suf);
  by_rule(fim_mid, rules.fim_mid);
  by_rule(fim_pad, rules.fim_pad);
  by_rule(fim_rep, rules.fim_rep);
  by_rule(fim_sep, rules.fim_sep);

  v.is_eog.assign(v.n, 0);
  auto mark = [&](int32_t id) {
    if (id != kNoToken) v.is_eog[id] = 1;
  };
  mark(fim_pad);
  mark(fim_rep);
  mark(fim_sep);
  for (std::string_view s : rules.eog) {
    const int32_t id = v.lookup(s);
    mark(id);
    make_control(v, id);
  }
  // gpt-oss: these structure the output and are always rendered.
  for (std::string_view s : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (int32_t id = v.lookup(s); id != kNoToken) v.types[id] = TokenType::kUserDefined;
  mark(v.eos);
  mark(v.eot);
  mark(v.eom);
  // o200k_harmony / solar-open: with <|return|>+<|call|> or <|calls|>+<|flush|>,
  // <|end|> only ends a message, not the generation.
  auto eog_text = [&](std::string_view s) {
    const int32_t id = v.lookup(s);
    return id != kNoToken && v.is_eog[id];
  };
  const bool has_call = eog_text("<|call|>") || eog_text("<|calls|>");
  if (eog_text("<|end|>") && has_call && (eog_text("<|return|>") || eog_text("<|flush|>"))) {
    const int32_t end = v.lookup("<|end|>");
    v.is_eog[end] = 0;
    v.types[end] = TokenType::kUserDefined;
  }
  // Gemma 4 / PaddleOCR: </s> is ordinary text there.
  if (eog_text("<|tool_response>") && eog_text("</s>")) {
    const int32_t s = v.lookup("</s>");
    v.is_eog[s] = 0;
    v.types[s] = TokenType::kNormal;
  }
  for (int32_t i = 0; i < v.n; ++i)
    if (v.is_eog[i]) v.eog.push_back(i);

  // Phi-3 (recognised by general.name, as llama.cpp does): special tokens
  // eat the whitespace that follows them, except <unk>, <s>, <|endoftext|>.
  std::string name(f.get_string_or("general.name", ""));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t i = 0; i < v.n; ++i) {
      const TokenType t = v.types[i];
      if (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown)
        v.strip[i] |= Impl::kRstrip;
    }
    if (int32_t id = v.lookup("</s>"); id != kNoToken) v.strip[id] |= Impl::kRstrip;
    for (std::string_view s : {"<unk>", "<s>", "<|endoftext|>"})
      if (int32_t id = v.lookup(s); id != kNoToken) v.strip[id] &= static_cast<uint8_t>(~Impl::kRstrip);
  }
  return Status::Ok();
}

void build_special_trie(Impl& v) {
  v.trie_token.assign(1, kNoToken);
  for (int32_t i = 0; i < v.n; ++i) {
    const TokenType t = v.types[i];
    if (t != TokenType::kControl && t != TokenType::kUserDefined && t != TokenType::kUnknown) continue;
    const std::string_view s = v.text(i);
    if (s.empty() || v.lookup(s) != i) continue;  // a duplicate text: the id `lookup` gives is the one used
    int32_t node = 0;
    for (char c : s) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
      auto [it, inserted] = v.trie_next.try_emplace(key, static_cast<int32_t>(v.trie_token.size()));
      if (inserted) v.trie_token.push_back(kNoToken);
      node = it->second;
    }
    v.trie_token[node] = i;
    v.trie_first[static_cast<uint8_t>(s[0])] = true;
  }
}

}  // namespace

Result<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  auto impl = std::make_shared<Impl>();
  Impl& v = *impl;

  EDGELM_ASSIGN(std::string_view model, f.get_string(kKeyModel));
  v.model = model;
  std::string_view pre = "";
  if (f.find(kKeyPre)) {
    EDGELM_ASSIGN(pre, f.get_string(kKeyPre));
  }
  if (model == "llama") {
    v.kind = VocabKind::kSpm;
    v.pre = PreTokenizerSpec{};
  } else if (model == "gpt2" || model == "gemma4") {
    v.kind = VocabKind::kBpe;
    if (model == "gemma4") pre = "gemma4";
    auto spec = find_pre_tokenizer(pre);
    if (!spec) {
      std::string known;
      for (std::string_view k : known_pre_tokenizers()) known += (known.empty() ? "" : ", ") + std::string(k);
      return make_error("{}: unsupported pre-tokenizer {} = '{}' (supported: {})", f.path(), kKeyPre, pre, known);
    }
    v.pre = *spec;
    EDGELM_ASSIGN(RegexSplitter splitter, RegexSplitter::compile(v.pre.regexes));
    v.splitter = std::move(splitter);
  } else {
    return make_error("{}: unsupported tokenizer model {} = '{}' (supported: llama, gpt2, gemma4)", f.path(),
                      kKeyModel, model);
  }

  EDGELM_TRY(load_tokens(f, v));
  if (v.kind == VocabKind::kBpe) EDGELM_TRY(load_merges(f, v));
  EDGELM_TRY(load_specials(f, v));
  if (v.pre.no_bos && !f.find("tokenizer.ggml.bos_token_id")) {
    v.bos = kNoToken;
    v.add_bos = false;
  }
  build_byte_tables(v);
  build_pieces(v);
  v.spm_word_segments = v.kind == VocabKind::kSpm && spm_segments_safe(v);
  build_special_trie(v);

  if (f.find("tokenizer.chat_template")) {
    EDGELM_ASSIGN(std::string_view tmpl, f.get_string("tokenizer.chat_template"));
    v.chat_template = tmpl;
  }
  return Tokenizer(std::move(impl));
}

}  // namespace edgelm::tokenizer
