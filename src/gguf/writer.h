// Writer of GGUF version 3 files. Used by tests (hand-made and hostile files)
// and by `edgelm synth`. Tensor data is produced one tensor at a time by a
// callback, so a multi-gigabyte model is written without holding it in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "gguf/gguf.h"

namespace edgelm::gguf {

class Writer {
 public:
  using Fill = std::function<void(std::span<uint8_t> dst)>;

  void set_u8(const std::string& key, uint8_t v);
  void set_i8(const std::string& key, int8_t v);
  void set_u16(const std::string& key, uint16_t v);
  void set_i16(const std::string& key, int16_t v);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_i64(const std::string& key, int64_t v);
  void set_f32(const std::string& key, float v);
  void set_f64(const std::string& key, double v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_strings(const std::string& key, const std::vector<std::string>& v);
  void set_f32s(const std::string& key, const std::vector<float>& v);
  void set_i32s(const std::string& key, const std::vector<int32_t>& v);
  void set_u32s(const std::string& key, const std::vector<uint32_t>& v);
  // An array of arrays of i32 (exercises nested arrays).
  void set_i32_arrays(const std::string& key, const std::vector<std::vector<int32_t>>& v);
  // Copies a value read from another file verbatim (any type, any nesting).
  void set_value(const std::string& key, const Value& v);
  void remove(const std::string& key);
  void set_alignment(uint32_t a);  // also writes general.alignment

  // Tensor with dims in GGUF order (dims[0] = row length). `fill` writes
  // exactly the tensor's bytes when the file is written.
  void add_tensor(const std::string& name, DType type, std::vector<int64_t> dims, Fill fill);
  void add_tensor(const std::string& name, DType type, std::vector<int64_t> dims, std::vector<uint8_t> bytes);

  Status write(const std::string& path) const;
  // The whole file in memory (tests).
  std::vector<uint8_t> to_bytes() const;

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> payload;
  };
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> dims;
    uint64_t nbytes;
    Fill fill;
  };
  void put(const std::string& key, ValueType t, std::vector<uint8_t> payload);
  std::vector<uint8_t> header(std::vector<uint64_t>& offsets) const;
  template <typename Sink>
  void emit(Sink&& sink) const;

  std::vector<Kv> kv_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = kDefaultAlignment;
};

}  // namespace edgelm::gguf
