#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

namespace edgelm::tokenizer {
namespace {

// The regexes, as in the models' tokenizer.json files. Where the original used
// a case-insensitive group (?i:'s|...), it is spelled out so that Unicode case
// folding (e.g. U+017F) cannot change the split.
constexpr std::string_view kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

constexpr std::string_view kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr std::string_view kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr std::string_view kQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr std::string_view kSeedCoder =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}"
    "| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Mistral's Tekken and OpenAI's o200k (GPT-4o, Llama 4): case-aware words.
constexpr std::string_view kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr std::string_view kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr std::string_view kDeepseekV3 =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr std::string_view kCjk = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";
constexpr std::string_view kDeepseekLetters = "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
constexpr std::string_view kDeepseekPunct = "\\s?[!-/:-~！-／：-～‘-‟　-。]+";

constexpr std::string_view kPoro = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+";

struct Entry {
  std::vector<std::string_view> aliases;
  PreTokenizerSpec spec;
};

PreTokenizerSpec make(std::vector<std::string_view> regexes) {
  PreTokenizerSpec s;
  s.regexes = std::move(regexes);
  return s;
}

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = [] {
    std::vector<Entry> v;
    auto add = [&](std::vector<std::string_view> aliases, PreTokenizerSpec spec) {
      spec.name = aliases.front();
      v.push_back(Entry{std::move(aliases), std::move(spec)});
    };
    add({"default"},
        make({"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}));
    add({"gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "trillion", "granite-docling", "jina-es", "jina-de",
         "jina-v2-es", "jina-v2-de", "gigachat", "a.x-4.0", "mellum", "modern-bert"},
        make({kGpt2}));
    {
      PreTokenizerSpec s = make({kLlama3});
      s.ignore_merges = true;
      s.add_bos = true;
      add({"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"}, s);
    }
    add({"dbrx", "smaug-bpe"}, make({kLlama3}));
    {
      PreTokenizerSpec s = make({kLlama3});
      s.no_bos = true;
      add({"chatglm-bpe", "glm4"}, s);
    }
    add({"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "hunyuan", "solar-open", "grok-2", "kormo"},
        make({kQwen2}));
    add({"qwen35"}, make({kQwen35}));
    add({"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2"},
        make({"\\p{N}", kGpt2}));
    add({"falcon"}, make({"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}));
    add({"deepseek-llm"}, make({"[\\r\\n]", kDeepseekLetters, kDeepseekPunct, "\\s+$", kCjk, "\\p{N}+"}));
    add({"deepseek-coder"}, make({"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"}));
    add({"deepseek-v3", "hunyuan-dense"},
        make({"\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+", kDeepseekV3}));
    {
      PreTokenizerSpec s = make({kTekken});
      s.ignore_merges = true;
      s.add_bos = true;
      add({"tekken"}, s);
    }
    add({"gpt-4o", "llama4", "minimax-m2"}, make({kGpt4o}));
    add({"seed-coder"}, make({kSeedCoder}));
    add({"poro-chat", "bloom", "gpt3-finnish"}, make({kPoro}));
    add({"viking"}, make({kPoro, "\\p{N}"}));
    {
      // SentencePiece-style BPE: spaces are U+2581, merges run on raw UTF-8
      // over whole lines, and bytes fall back to <0xXX> tokens.
      PreTokenizerSpec s = make({"[^\\n]+|[\\n]+"});
      s.byte_encode = false;
      s.escape_whitespace = true;
      s.add_bos = true;
      add({"gemma4"}, s);
    }
    return v;
  }();
  return t;
}

}  // namespace

std::optional<PreTokenizerSpec> find_pre_tokenizer(std::string_view pre) {
  if (pre.empty()) pre = "default";
  for (const Entry& e : table())
    for (std::string_view a : e.aliases)
      if (a == pre) return e.spec;
  return std::nullopt;
}

std::vector<std::string_view> known_pre_tokenizers() {
  std::vector<std::string_view> names;
  for (const Entry& e : table()) names.insert(names.end(), e.aliases.begin(), e.aliases.end());
  return names;
}

struct RegexSplitter::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() { pcre2_code_free(code); }
};

Result<RegexSplitter> RegexSplitter::compile(const std::vector<std::string_view>& patterns) {
  RegexSplitter s;
  for (std::string_view p : patterns) {
    int err = 0;
    PCRE2_SIZE off = 0;
    auto pat = std::make_shared<Pattern>();
    // DOLLAR_ENDONLY: '$' means the end of the piece, never "before a final \n".
    pat->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &off, nullptr);
    if (!pat->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return make_error("pre-tokenizer regex /{}/ does not compile at offset {}: {}", p, off,
                        reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(pat->code, PCRE2_JIT_COMPLETE);  // failure only means slower matching
    s.patterns_.push_back(std::move(pat));
  }
  return s;
}

namespace {

// Appends the pieces of text[r] cut by one regex: the matches and the gaps.
void split_piece(const pcre2_code* code, pcre2_match_data* md, std::string_view text, ByteRange r,
                 std::vector<ByteRange>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + r.begin);
  const size_t len = r.end - r.begin;
  size_t pos = 0, gap = 0;  // next search start; start of the unmatched text
  while (pos < len) {
    // The text is valid UTF-8 (checked once by the caller), so skip PCRE2's
    // check, which would otherwise rescan the whole piece on every call.
    int rc = pcre2_match(code, subject, len, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(code, subject, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    if (rc < 0) break;  // no match (or a resource limit): the rest is one gap
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e <= b) {  // empty match: cannot cut here, move one character on
      pos = b + 1;
      while (pos < len && (static_cast<uint8_t>(subject[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (b > gap) out.push_back({r.begin + gap, r.begin + b});
    out.push_back({r.begin + b, r.begin + e});
    pos = gap = e;
  }
  if (gap < len) out.push_back({r.begin + gap, r.end});
}

}  // namespace

void RegexSplitter::split(std::string_view text, std::vector<ByteRange>& words) const {
  if (text.empty()) return;
  std::vector<ByteRange> cur{{0, text.size()}}, next;
  for (const auto& p : patterns_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(p->code, nullptr);
    if (!md) break;  // out of memory: keep the coarser cut
    next.clear();
    for (ByteRange r : cur) split_piece(p->code, md, text, r, next);
    pcre2_match_data_free(md);
    std::swap(cur, next);
  }
  words.insert(words.end(), cur.begin(), cur.end());
}

}  // namespace edgelm::tokenizer
