// Text <-> token ids for GGUF vocabularies, matching llama.cpp's tokenizer.
//
// Two vocab kinds (tokenizer.ggml.model):
//   "llama"  SentencePiece-style: ' ' -> U+2581, optional space prefix,
//            score-ordered bigram merges, <0xXX> byte fallback, <unk>.
//   "gpt2"   byte-level BPE: regex pre-split chosen by tokenizer.ggml.pre,
//            bytes drawn as GPT-2 code points, rank-ordered merges.
//   "gemma4" BPE over raw UTF-8 with U+2581 spaces and <0xXX> fallback.
// Special tokens (CONTROL, USER_DEFINED, UNKNOWN types) are cut out of the text
// before either algorithm runs: USER_DEFINED always, the others only when the
// caller asks (parse_special). Matching is leftmost-longest, as HF tokenizers do.
//
// A Tokenizer is immutable after from_gguf() and shares its tables between
// copies, so one instance may be used from many threads at once. It owns all
// its data: the gguf::File can be closed afterwards.
//
// Cost: encode is O(n log n) in the text length (priority-queue merges; the
// special-token scan and the regexes are linear); it allocates working
// buffers per call. token_piece_view() and Utf8Stream allocate nothing per token.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace edgelm::tokenizer {

inline constexpr int32_t kNoToken = -1;

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class VocabKind { kSpm, kBpe };

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* metadata. Malformed data (wrong value types,
  // missing or mismatched arrays, special ids outside the vocab, unknown
  // model or pre-tokenizer names) is an Error naming the key.
  static Result<Tokenizer> from_gguf(const gguf::File& file);

  // add_special: BOS/EOS as tokenizer.ggml.add_bos_token/add_eos_token say.
  // parse_special: text such as "<|im_start|>" becomes that CONTROL token;
  // otherwise it is tokenized as plain text (USER_DEFINED tokens are matched
  // either way, as in llama.cpp).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes token `id` contributes to output text: byte tokens give one
  // byte, SPM U+2581 gives ' ', byte-level BPE code points give their bytes.
  // CONTROL/UNKNOWN tokens give "" unless `special` (then their text);
  // UNUSED/UNDEFINED tokens and ids outside the vocab give "".
  std::string token_piece(int32_t id, bool special = false) const {
    return std::string(token_piece_view(id, special));
  }
  // The same bytes without copying (valid while the Tokenizer lives).
  std::string_view token_piece_view(int32_t id, bool special = false) const;

  // Concatenated pieces. skip_special=false renders CONTROL tokens as text.
  // For vocabs with add_space_prefix (SPM), the space that encode() put in
  // front of the text is removed from the first token that produces output.
  // encode() also puts one after every special token (llama.cpp does); that
  // one stays, so "a<tool>b" comes back as "a<tool> b".
  std::string decode(std::span<const int32_t> ids, bool skip_special = true) const;

  int32_t n_vocab() const;
  VocabKind kind() const;
  std::string_view model_name() const;  // tokenizer.ggml.model
  std::string_view pre_name() const;    // canonical pre-tokenizer ("" for SPM)

  // Special ids, kNoToken when the vocab has none.
  int32_t bos() const;
  int32_t eos() const;
  int32_t eot() const;
  int32_t eom() const;
  int32_t unk() const;
  int32_t pad() const;
  bool add_bos() const;  // encode(add_special=true) prepends bos()
  bool add_eos() const;  // encode(add_special=true) appends eos()
  bool add_space_prefix() const;

  // End of generation: EOS, EOT, EOM and the tokens llama.cpp treats as such
  // by their text (<|im_end|>, <|eot_id|>, <|endoftext|>, <end_of_turn>, ...).
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const;  // sorted

  std::optional<int32_t> find(std::string_view token_text) const;
  std::string_view text(int32_t id) const;  // raw vocab text; "" out of range
  TokenType type(int32_t id) const;         // kUndefined out of range
  float score(int32_t id) const;            // 0 out of range

  // tokenizer.chat_template, "" when absent.
  std::string_view chat_template() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace edgelm::tokenizer
