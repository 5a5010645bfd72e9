// A JSON schema compiled for generation: a table of nodes, each saying which
// JSON texts a value may be, in a form the byte matcher (matcher.h) can step
// through one byte at a time. Built by the serve layer from the request's
// schema (serve/json_schema.h); nothing here knows JSON the library or HTTP.
//
// Generation is stricter than validation (the matcher produces a subset of
// the valid texts, never a text outside it): objects hold only declared
// properties, in declared order, each at most once; no whitespace but one
// optional space after ':' and ','; numbers without exponents; strings of
// printable characters and the escapes \" \\ \/ \b \f \n \r \t (no \u).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/status.h"

namespace edgelm::constrain {

inline constexpr int kUnbounded = std::numeric_limits<int>::max() / 4;

// A set of bytes.
struct ByteSet {
  uint64_t w[4] = {0, 0, 0, 0};
  bool has(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  void add(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) w[i] |= o.w[i];
  }
  bool intersects(const ByteSet& o) const {
    for (int i = 0; i < 4; ++i)
      if (w[i] & o.w[i]) return true;
    return false;
  }
  bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
};

// A string pattern as a chain of steps, each one byte of a class, matched
// once, at most once, or any number of times: what ^[a-z]{2,5}-\d+$ is.
// Matching keeps the set of chain positions reached (a bit per position).
enum class Rep : uint8_t { One, Optional, Star };
struct PatternStep {
  ByteSet bytes;  // printable ASCII only, never '"' or '\'
  Rep rep = Rep::One;
};
struct Pattern {
  static constexpr int kMaxSteps = 63;  // positions 0..steps, one bit each
  std::vector<PatternStep> steps;
  // Filled by finish(): for each position 0..steps.size(),
  std::vector<uint64_t> closure;  // the positions reachable without a byte
  std::vector<int> min_rest;      // bytes still needed to reach the end
  std::vector<int> max_rest;      // bytes at most to the end (kUnbounded)
  void finish();
  uint64_t start() const { return closure[0]; }
  uint64_t step(uint64_t set, uint8_t b) const;
  int end() const { return static_cast<int>(steps.size()); }
};

enum class Kind : uint8_t {
  Object,   // '{' ... '}'
  Array,    // '[' ... ']'
  String,   // '"' ... '"'
  Integer,  // -?[0-9]+ within bounds
  Number,   // -?[0-9]+(\.[0-9]+)? within bounds
  Literal,  // one of a few fixed texts (enum, const, true, false, null)
  Choice,   // one of several nodes, told apart by the value's first byte
};

struct Property {
  std::string key;  // the key as it is written, quotes included: "\"name\""
  int node = -1;
  bool required = false;
};

struct Node {
  Kind kind = Kind::Literal;
  // Object: declared properties, written in this order, each at most once.
  std::vector<Property> props;
  // Object with no declared properties: any keys, values of node `extra`.
  bool free_keys = false;
  int extra = -1;
  // Array
  int items = -1;
  int min_items = 0, max_items = kUnbounded;
  // String: lengths in characters (code points)
  int min_len = 0, max_len = kUnbounded;
  int pattern = -1;  // index into Schema::patterns
  // Integer / Number
  bool has_lo = false, has_hi = false, lo_excl = false, hi_excl = false;
  double lo = 0, hi = 0;
  // Literal: the texts, as written in the output
  std::vector<std::string> literals;
  // Choice: the alternatives (their first bytes are disjoint)
  std::vector<int> alts;

  // Filled by Schema::finish():
  ByteSet first;           // the bytes a value may start with
  int min_bytes = 0;       // the shortest value, in bytes
  bool container = false;  // pushes a frame that may push more (for the depth limit)
  // Object: for each property index i, the bytes the required properties
  // from i on need (each with its leading ',').
  std::vector<int> req_suffix;
};

struct Schema {
  // Frames the matcher can hold: the deepest nesting a schema may have.
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxNodes = 4096;

  std::vector<Node> nodes;
  std::vector<Pattern> patterns;
  int root = -1;

  int add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<int>(nodes.size()) - 1;
  }
  // A node for any JSON value (json_object's values), made on first use;
  // containers of it nest only as deep as the matcher has frames.
  int any();
  // Any string (free-form keys).
  int any_string();
  int any_string_node() const { return any_string_; }

  // Computes first bytes and shortest lengths, and checks that every node
  // can produce a value, the choices are told apart by their first byte, and
  // the nesting fits kMaxDepth. An Error names what fails (node paths are
  // the compiler's business; the message says what the node is).
  Status finish();

 private:
  int any_ = -1, any_string_ = -1;
};

}  // namespace edgelm::constrain
