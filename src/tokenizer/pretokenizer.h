// Byte-level BPE pre-tokenization: the text is cut into words by the regexes
// that tokenizer.ggml.pre names, and merges never cross a word boundary.
//
// Regexes are PCRE2 (UTF + UCP, JIT when available). Several regexes are
// applied in sequence, each one cutting every piece left by the previous one;
// the text between two matches is kept as a piece of its own. This is the
// behaviour of HF tokenizers' Split(behavior=Isolated) chain and of llama.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace edgelm::tokenizer {

// What tokenizer.ggml.pre selects besides the regexes.
struct PreTokenizerSpec {
  std::string_view name;                // canonical name (the first alias)
  std::vector<std::string_view> regexes;
  bool ignore_merges = false;           // a word that is itself a token is emitted whole
  bool add_bos = false;                 // default of add_bos before tokenizer.ggml.add_bos_token
  bool no_bos = false;                  // the vocab has no BOS (ChatGLM)
  bool byte_encode = true;              // GPT-2 byte->unicode mapping before merging
  bool escape_whitespace = false;       // ' ' -> U+2581 before merging (Gemma 4)
};

// nullopt for a name this build does not know. "" selects "default".
std::optional<PreTokenizerSpec> find_pre_tokenizer(std::string_view pre);
// Every accepted name (for error messages and docs).
std::vector<std::string_view> known_pre_tokenizers();

struct ByteRange {
  size_t begin = 0, end = 0;
};

class RegexSplitter {
 public:
  static Result<RegexSplitter> compile(const std::vector<std::string_view>& patterns);

  // Cuts `text` (valid UTF-8) into non-empty words that tile it, appended to
  // `words` as byte ranges. Cost: linear in the text for these patterns; a
  // regex engine failure (resource limit) keeps the rest of that piece whole.
  void split(std::string_view text, std::vector<ByteRange>& words) const;

 private:
  struct Pattern;
  std::vector<std::shared_ptr<const Pattern>> patterns_;
};

}  // namespace edgelm::tokenizer
