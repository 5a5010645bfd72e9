// Reader of GGUF files (versions 2 and 3), bounds-checked against hostile input.
//
// The file is memory-mapped and never copied: metadata values and tensor data
// are views into the mapping. Parsing validates every count, length and offset
// against the bytes actually present before trusting it, so a corrupt file costs
// at most a small multiple of its own size in heap and ends in one error line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"

namespace edgelm::gguf {

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

std::string_view value_type_name(ValueType t);
// Bytes of a fixed-size scalar type; 0 for STRING and ARRAY.
size_t scalar_size(ValueType t);

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;

// One metadata value: a view into the mapping plus what is needed for O(1)
// access to array elements.
class Value {
 public:
  ValueType type() const { return type_; }
  bool is_array() const { return type_ == ValueType::ARRAY; }
  ValueType elem_type() const { return elem_; }
  // Number of elements of an array (0 for a scalar).
  uint64_t size() const { return count_; }

  // Scalars. Integers convert between widths only when the value fits.
  std::optional<int64_t> as_int() const;
  std::optional<uint64_t> as_uint() const;
  std::optional<double> as_float() const;  // F32, F64
  std::optional<bool> as_bool() const;
  std::optional<std::string_view> as_string() const;

  // Array elements; i < size(). The element accessors return nullopt when the
  // element type does not convert.
  std::optional<int64_t> int_at(uint64_t i) const;
  std::optional<double> float_at(uint64_t i) const;
  std::optional<std::string_view> string_at(uint64_t i) const;
  const Value& array_at(uint64_t i) const { return children_[i]; }  // nested arrays

  // The raw encoded payload (after the type tag); used to copy values verbatim.
  const uint8_t* raw() const { return raw_; }
  size_t raw_size() const { return raw_size_; }

 private:
  friend class Parser;
  const uint8_t* scalar_ptr(uint64_t i) const { return raw_ + 12 + i * scalar_size(elem_); }

  ValueType type_ = ValueType::U8;
  ValueType elem_ = ValueType::U8;
  uint64_t count_ = 0;
  const uint8_t* raw_ = nullptr;
  size_t raw_size_ = 0;
  std::vector<const uint8_t*> strings_;  // element starts of a STRING array
  std::vector<Value> children_;          // elements of an ARRAY of ARRAYs
};

struct KeyValue {
  std::string_view key;
  Value value;
};

struct TensorInfo {
  std::string_view name;
  uint32_t n_dims = 0;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  DType type = DType::F32;
  uint64_t offset = 0;  // relative to the start of the data section
  uint64_t nbytes = 0;
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;
};

class File {
 public:
  static Result<File> open(const std::string& path);
  // Parses an existing mapping (tests, fuzzing).
  static Result<File> parse(MappedFile map);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return map_.size(); }
  const std::string& path() const { return map_.path(); }
  const MappedFile& mapping() const { return map_; }

  const std::vector<KeyValue>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;

  // Typed getters whose errors name the key and what was wrong.
  Result<std::string_view> get_string(std::string_view key) const;
  Result<uint64_t> get_uint(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;  // also accepts integers
  Result<bool> get_bool(std::string_view key) const;
  std::string_view get_string_or(std::string_view key, std::string_view dflt) const;
  uint64_t get_uint_or(std::string_view key, uint64_t dflt) const;
  double get_float_or(std::string_view key, double dflt) const;
  bool get_bool_or(std::string_view key, bool dflt) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const uint8_t* tensor_data(const TensorInfo& t) const { return map_.data() + data_offset_ + t.offset; }
  // Sum of the bytes of all tensors' data.
  uint64_t tensor_bytes() const;

 private:
  friend class Parser;
  MappedFile map_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kv_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

// A metadata value rendered for humans (arrays abbreviated after `max_items`).
std::string format_value(const Value& v, size_t max_items = 8);

}  // namespace edgelm::gguf
