#include "gguf/gguf.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace edgelm::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "?";
}

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL: return 1;
    case ValueType::U16:
    case ValueType::I16: return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32: return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64: return 8;
    case ValueType::STRING:
    case ValueType::ARRAY: return 0;
  }
  return 0;
}

namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

// Reads a scalar of type t at p as a signed 64-bit integer, if it is an integer type.
std::optional<int64_t> int_of(ValueType t, const uint8_t* p) {
  switch (t) {
    case ValueType::U8: return load<uint8_t>(p);
    case ValueType::I8: return load<int8_t>(p);
    case ValueType::U16: return load<uint16_t>(p);
    case ValueType::I16: return load<int16_t>(p);
    case ValueType::U32: return load<uint32_t>(p);
    case ValueType::I32: return load<int32_t>(p);
    case ValueType::I64: return load<int64_t>(p);
    case ValueType::U64: {
      uint64_t v = load<uint64_t>(p);
      if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<int64_t>(v);
    }
    case ValueType::BOOL: return load<uint8_t>(p) != 0;
    default: return std::nullopt;
  }
}

std::optional<double> float_of(ValueType t, const uint8_t* p) {
  if (t == ValueType::F32) return load<float>(p);
  if (t == ValueType::F64) return load<double>(p);
  return std::nullopt;
}

}  // namespace

// ---------------------------------------------------------------------------
// Value accessors

std::optional<int64_t> Value::as_int() const {
  if (type_ == ValueType::U64) {
    uint64_t v = load<uint64_t>(raw_);
    if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  if (type_ == ValueType::BOOL || type_ == ValueType::STRING || type_ == ValueType::ARRAY)
    return std::nullopt;
  return int_of(type_, raw_);
}

std::optional<uint64_t> Value::as_uint() const {
  if (type_ == ValueType::U64) return load<uint64_t>(raw_);
  auto v = as_int();
  if (!v || *v < 0) return std::nullopt;
  return static_cast<uint64_t>(*v);
}

std::optional<double> Value::as_float() const { return float_of(type_, raw_); }

std::optional<bool> Value::as_bool() const {
  if (type_ != ValueType::BOOL) return std::nullopt;
  return load<uint8_t>(raw_) != 0;
}

std::optional<std::string_view> Value::as_string() const {
  if (type_ != ValueType::STRING) return std::nullopt;
  uint64_t n = load<uint64_t>(raw_);
  return std::string_view(reinterpret_cast<const char*>(raw_ + 8), n);
}

std::optional<int64_t> Value::int_at(uint64_t i) const {
  if (type_ != ValueType::ARRAY || i >= count_ || scalar_size(elem_) == 0) return std::nullopt;
  return int_of(elem_, scalar_ptr(i));
}

std::optional<double> Value::float_at(uint64_t i) const {
  if (type_ != ValueType::ARRAY || i >= count_ || scalar_size(elem_) == 0) return std::nullopt;
  if (auto f = float_of(elem_, scalar_ptr(i))) return f;
  if (auto v = int_of(elem_, scalar_ptr(i))) return static_cast<double>(*v);
  return std::nullopt;
}

std::optional<std::string_view> Value::string_at(uint64_t i) const {
  if (type_ != ValueType::ARRAY || elem_ != ValueType::STRING || i >= count_) return std::nullopt;
  const uint8_t* p = strings_[i];
  return std::string_view(reinterpret_cast<const char*>(p + 8), load<uint64_t>(p));
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (uint32_t i = 0; i < n_dims; ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

// ---------------------------------------------------------------------------
// Parser

class Parser {
 public:
  explicit Parser(File& f) : f_(f), base_(f.map_.data()), size_(f.map_.size()) {}

  Status run() {
    if (size_ < 4) return make_error("{}: not a GGUF file (only {} bytes)", f_.path(), size_);
    if (load<uint32_t>(base_) != kMagic) {
      return make_error("{}: not a GGUF file (bad magic {:02x} {:02x} {:02x} {:02x})", f_.path(),
                        base_[0], base_[1], base_[2], base_[3]);
    }
    pos_ = 4;
    uint32_t version = 0;
    EDGELM_TRY(read_u32(version, "version"));
    if (version == 1) return err("GGUF version 1 is not supported (re-convert the model)");
    if ((version & 0xffff) == 0 && version != 0)
      return err("big-endian GGUF files are not supported");
    if (version != 2 && version != 3) return err(fmt::format("unsupported GGUF version {}", version));
    f_.version_ = version;

    uint64_t n_tensors = 0, n_kv = 0;
    EDGELM_TRY(read_u64(n_tensors, "tensor count"));
    EDGELM_TRY(read_u64(n_kv, "metadata count"));
    // Every key-value needs at least 8 (key length) + 4 (type) + 1 bytes, every
    // tensor info 8 + 4 + 8 + 4 + 8: a count beyond that cannot be honest.
    if (n_kv > remaining() / 13) return err(fmt::format("metadata count {} exceeds what the file can hold", n_kv));
    if (n_tensors > remaining() / 32)
      return err(fmt::format("tensor count {} exceeds what the file can hold", n_tensors));

    f_.kv_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      KeyValue kv;
      EDGELM_TRY(read_string(kv.key, fmt::format("key of metadata entry {}", i)));
      uint32_t t = 0;
      EDGELM_TRY(read_u32(t, fmt::format("type of metadata '{}'", kv.key)));
      if (!valid_value_type(t)) return err(fmt::format("metadata '{}' has invalid type {}", kv.key, t));
      EDGELM_TRY(read_value(kv.value, static_cast<ValueType>(t), kv.key, 0));
      if (f_.kv_index_.count(kv.key)) return err(fmt::format("duplicate metadata key '{}'", kv.key));
      f_.kv_index_.emplace(kv.key, f_.kv_.size());
      f_.kv_.push_back(std::move(kv));
    }

    if (const Value* a = f_.find("general.alignment")) {
      auto v = a->as_uint();
      if (a->type() != ValueType::U32 || !v || *v == 0 || (*v & (*v - 1)) != 0 || *v > (1u << 20))
        return err("general.alignment must be a u32 power of two");
      f_.alignment_ = static_cast<uint32_t>(*v);
    }

    f_.tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      TensorInfo ti;
      EDGELM_TRY(read_tensor_info(ti, i));
      if (f_.tensor_index_.count(ti.name)) return err(fmt::format("duplicate tensor name '{}'", ti.name));
      f_.tensor_index_.emplace(ti.name, f_.tensors_.size());
      f_.tensors_.push_back(ti);
    }

    const uint64_t align = f_.alignment_;
    uint64_t data = (pos_ + align - 1) / align * align;
    if (n_tensors > 0 && data > size_) return err("data section starts past the end of the file");
    f_.data_offset_ = std::min<uint64_t>(data, size_);
    return check_tensor_extents();
  }

 private:
  // Names in `what` come from the file: the message is made one printable line.
  Error err(const std::string& what) const {
    return make_error("{}: invalid GGUF at byte {}: {}", f_.path(), pos_, printable(what, 300));
  }
  uint64_t remaining() const { return size_ - pos_; }

  Status need(uint64_t n, std::string_view what) {
    if (n > remaining())
      return err(fmt::format("truncated: {} needs {} bytes, {} left", what, n, remaining()));
    return Status::Ok();
  }
  Status read_u32(uint32_t& v, std::string_view what) {
    EDGELM_TRY(need(4, what));
    v = load<uint32_t>(base_ + pos_);
    pos_ += 4;
    return Status::Ok();
  }
  Status read_u64(uint64_t& v, std::string_view what) {
    EDGELM_TRY(need(8, what));
    v = load<uint64_t>(base_ + pos_);
    pos_ += 8;
    return Status::Ok();
  }
  Status read_string(std::string_view& s, std::string_view what) {
    uint64_t n = 0;
    EDGELM_TRY(read_u64(n, what));
    EDGELM_TRY(need(n, what));
    s = std::string_view(reinterpret_cast<const char*>(base_ + pos_), n);
    pos_ += n;
    return Status::Ok();
  }

  Status read_value(Value& v, ValueType t, std::string_view key, int depth) {
    if (depth > 8) return err(fmt::format("metadata '{}' nests arrays too deeply", key));
    v.type_ = t;
    v.raw_ = base_ + pos_;
    const uint64_t start = pos_;
    if (t == ValueType::STRING) {
      std::string_view s;
      EDGELM_TRY(read_string(s, fmt::format("string value of '{}'", key)));
    } else if (t == ValueType::ARRAY) {
      uint32_t et = 0;
      uint64_t n = 0;
      EDGELM_TRY(read_u32(et, fmt::format("array type of '{}'", key)));
      if (!valid_value_type(et)) return err(fmt::format("metadata '{}' has invalid array element type {}", key, et));
      EDGELM_TRY(read_u64(n, fmt::format("array length of '{}'", key)));
      v.elem_ = static_cast<ValueType>(et);
      v.count_ = n;
      const size_t es = scalar_size(v.elem_);
      if (es > 0) {
        if (n > remaining() / es)
          return err(fmt::format("array '{}' of {} {} elements runs past the end of the file", key, n,
                                 value_type_name(v.elem_)));
        pos_ += n * es;
      } else if (v.elem_ == ValueType::STRING) {
        if (n > remaining() / 8) return err(fmt::format("array '{}' claims {} strings, more than the file holds", key, n));
        v.strings_.reserve(n);
        for (uint64_t i = 0; i < n; ++i) {
          v.strings_.push_back(base_ + pos_);
          std::string_view s;
          EDGELM_TRY(read_string(s, fmt::format("element {} of '{}'", i, key)));
        }
      } else {  // array of arrays
        if (n > remaining() / 12) return err(fmt::format("array '{}' claims {} arrays, more than the file holds", key, n));
        v.children_.resize(n);
        for (uint64_t i = 0; i < n; ++i) EDGELM_TRY(read_value(v.children_[i], ValueType::ARRAY, key, depth + 1));
      }
    } else {
      EDGELM_TRY(need(scalar_size(t), fmt::format("value of '{}'", key)));
      pos_ += scalar_size(t);
    }
    v.raw_size_ = pos_ - start;
    return Status::Ok();
  }

  Status read_tensor_info(TensorInfo& ti, uint64_t index) {
    EDGELM_TRY(read_string(ti.name, fmt::format("name of tensor {}", index)));
    EDGELM_TRY(read_u32(ti.n_dims, fmt::format("dimension count of tensor '{}'", ti.name)));
    if (ti.n_dims == 0 || ti.n_dims > kMaxDims)
      return err(fmt::format("tensor '{}' has {} dimensions (1 to {} allowed)", ti.name, ti.n_dims, kMaxDims));
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < ti.n_dims; ++d) {
      uint64_t ne = 0;
      EDGELM_TRY(read_u64(ne, fmt::format("dimension {} of tensor '{}'", d, ti.name)));
      if (ne > static_cast<uint64_t>(INT64_MAX) ||
          __builtin_mul_overflow(n_elements, static_cast<int64_t>(ne), &n_elements))
        return err(fmt::format("tensor '{}' has an impossible size", ti.name));
      ti.ne[d] = static_cast<int64_t>(ne);
    }
    uint32_t type_id = 0;
    EDGELM_TRY(read_u32(type_id, fmt::format("type of tensor '{}'", ti.name)));
    auto info = dtype_info(type_id);
    if (!info) return err(fmt::format("tensor '{}' has unknown type id {}", ti.name, type_id));
    ti.type = static_cast<DType>(type_id);
    if (ti.ne[0] % info->block_size != 0)
      return err(fmt::format("tensor '{}' of type {}: row length {} is not a multiple of the block size {}",
                             ti.name, info->name, ti.ne[0], info->block_size));
    EDGELM_TRY(read_u64(ti.offset, fmt::format("offset of tensor '{}'", ti.name)));
    if (ti.offset % f_.alignment_ != 0)
      return err(fmt::format("tensor '{}' offset {} is not a multiple of the alignment {}", ti.name, ti.offset,
                             f_.alignment_));
    const uint64_t blocks = static_cast<uint64_t>(n_elements) / info->block_size;
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(info->type_size), &ti.nbytes))
      return err(fmt::format("tensor '{}' has an impossible size", ti.name));
    return Status::Ok();
  }

  Status check_tensor_extents() {
    const uint64_t data_size = size_ - f_.data_offset_;
    std::vector<size_t> order(f_.tensors_.size());
    std::iota(order.begin(), order.end(), 0);
    for (const TensorInfo& t : f_.tensors_) {
      if (t.offset > data_size || t.nbytes > data_size - t.offset)
        return make_error("{}: tensor '{}' ({} bytes at data offset {}) runs past the end of the file ({} data bytes)",
                          f_.path(), printable(t.name), t.nbytes, t.offset, data_size);
    }
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return f_.tensors_[a].offset < f_.tensors_[b].offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const TensorInfo& a = f_.tensors_[order[i - 1]];
      const TensorInfo& b = f_.tensors_[order[i]];
      if (a.nbytes > 0 && a.offset + a.nbytes > b.offset)
        return make_error("{}: tensors '{}' and '{}' overlap", f_.path(), printable(a.name), printable(b.name));
    }
    return Status::Ok();
  }

  File& f_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// ---------------------------------------------------------------------------
// File

Result<File> File::open(const std::string& path) {
  EDGELM_ASSIGN(MappedFile map, MappedFile::open(path));
  return parse(std::move(map));
}

Result<File> File::parse(MappedFile map) {
  File f;
  f.map_ = std::move(map);
  Parser p(f);
  EDGELM_TRY(p.run());
  return f;
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t File::tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.nbytes;
  return n;
}

Result<std::string_view> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return make_error("{}: missing metadata key '{}'", path(), key);
  auto s = v->as_string();
  if (!s) return make_error("{}: metadata '{}' is {}, expected a string", path(), key, value_type_name(v->type()));
  return *s;
}

Result<uint64_t> File::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return make_error("{}: missing metadata key '{}'", path(), key);
  auto s = v->as_uint();
  if (!s)
    return make_error("{}: metadata '{}' is {}, expected a non-negative integer", path(), key,
                      value_type_name(v->type()));
  return *s;
}

Result<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return make_error("{}: missing metadata key '{}'", path(), key);
  if (auto f = v->as_float()) return *f;
  if (auto i = v->as_int()) return static_cast<double>(*i);
  return make_error("{}: metadata '{}' is {}, expected a number", path(), key, value_type_name(v->type()));
}

Result<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return make_error("{}: missing metadata key '{}'", path(), key);
  auto b = v->as_bool();
  if (!b) return make_error("{}: metadata '{}' is {}, expected a bool", path(), key, value_type_name(v->type()));
  return *b;
}

std::string_view File::get_string_or(std::string_view key, std::string_view dflt) const {
  const Value* v = find(key);
  auto s = v ? v->as_string() : std::nullopt;
  return s ? *s : dflt;
}

uint64_t File::get_uint_or(std::string_view key, uint64_t dflt) const {
  const Value* v = find(key);
  auto s = v ? v->as_uint() : std::nullopt;
  return s ? *s : dflt;
}

double File::get_float_or(std::string_view key, double dflt) const {
  auto r = get_float(key);
  return r.ok() ? r.value() : dflt;
}

bool File::get_bool_or(std::string_view key, bool dflt) const {
  const Value* v = find(key);
  auto b = v ? v->as_bool() : std::nullopt;
  return b ? *b : dflt;
}

std::string format_value(const Value& v, size_t max_items) {
  switch (v.type()) {
    case ValueType::STRING: {
      std::string s(*v.as_string());
      if (s.size() > 80) {
        s.resize(77);
        s.append("...");
      }
      for (char& c : s)
        if (c == '\n') c = ' ';
      return fmt::format("\"{}\"", s);
    }
    case ValueType::BOOL: return *v.as_bool() ? "true" : "false";
    case ValueType::F32:
    case ValueType::F64: return fmt::format("{}", *v.as_float());
    case ValueType::U64: return fmt::format("{}", *v.as_uint());
    case ValueType::ARRAY: {
      std::string s = fmt::format("[{} x {}: ", v.size(), value_type_name(v.elem_type()));
      for (uint64_t i = 0; i < std::min<uint64_t>(v.size(), max_items); ++i) {
        if (i) s += ", ";
        if (v.elem_type() == ValueType::STRING) s += fmt::format("\"{}\"", *v.string_at(i));
        else if (v.elem_type() == ValueType::ARRAY) s += format_value(v.array_at(i), 2);
        else if (v.elem_type() == ValueType::F32 || v.elem_type() == ValueType::F64) s += fmt::format("{}", *v.float_at(i));
        else s += fmt::format("{}", v.int_at(i).value_or(0));
      }
      if (v.size() > max_items) s += ", ...";
      return s + "]";
    }
    default: return fmt::format("{}", v.as_int().value_or(0));
  }
}

}  // namespace edgelm::gguf
