#include "gguf/writer.h"

#include <cstdio>
#include <cstring>
#include <memory>

namespace edgelm::gguf {
namespace {

template <typename T>
void append(std::vector<uint8_t>& out, T v) {
  const size_t n = out.size();
  out.resize(n + sizeof(T));
  std::memcpy(out.data() + n, &v, sizeof(T));
}

void append_str(std::vector<uint8_t>& out, const std::string& s) {
  append<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

template <typename T>
std::vector<uint8_t> scalar(T v) {
  std::vector<uint8_t> p;
  append(p, v);
  return p;
}

template <typename T>
std::vector<uint8_t> array_of(ValueType et, const std::vector<T>& v) {
  std::vector<uint8_t> p;
  append<uint32_t>(p, static_cast<uint32_t>(et));
  append<uint64_t>(p, v.size());
  for (const T& x : v) append(p, x);
  return p;
}

}  // namespace

void Writer::put(const std::string& key, ValueType t, std::vector<uint8_t> payload) {
  for (Kv& kv : kv_) {
    if (kv.key == key) {
      kv.type = static_cast<uint32_t>(t);
      kv.payload = std::move(payload);
      return;
    }
  }
  kv_.push_back(Kv{key, static_cast<uint32_t>(t), std::move(payload)});
}

void Writer::set_u8(const std::string& k, uint8_t v) { put(k, ValueType::U8, scalar(v)); }
void Writer::set_i8(const std::string& k, int8_t v) { put(k, ValueType::I8, scalar(v)); }
void Writer::set_u16(const std::string& k, uint16_t v) { put(k, ValueType::U16, scalar(v)); }
void Writer::set_i16(const std::string& k, int16_t v) { put(k, ValueType::I16, scalar(v)); }
void Writer::set_u32(const std::string& k, uint32_t v) { put(k, ValueType::U32, scalar(v)); }
void Writer::set_i32(const std::string& k, int32_t v) { put(k, ValueType::I32, scalar(v)); }
void Writer::set_u64(const std::string& k, uint64_t v) { put(k, ValueType::U64, scalar(v)); }
void Writer::set_i64(const std::string& k, int64_t v) { put(k, ValueType::I64, scalar(v)); }
void Writer::set_f32(const std::string& k, float v) { put(k, ValueType::F32, scalar(v)); }
void Writer::set_f64(const std::string& k, double v) { put(k, ValueType::F64, scalar(v)); }
void Writer::set_bool(const std::string& k, bool v) { put(k, ValueType::BOOL, scalar<uint8_t>(v ? 1 : 0)); }

void Writer::set_string(const std::string& k, const std::string& v) {
  std::vector<uint8_t> p;
  append_str(p, v);
  put(k, ValueType::STRING, std::move(p));
}

void Writer::set_strings(const std::string& k, const std::vector<std::string>& v) {
  std::vector<uint8_t> p;
  append<uint32_t>(p, static_cast<uint32_t>(ValueType::STRING));
  append<uint64_t>(p, v.size());
  for (const auto& s : v) append_str(p, s);
  put(k, ValueType::ARRAY, std::move(p));
}

void Writer::set_f32s(const std::string& k, const std::vector<float>& v) {
  put(k, ValueType::ARRAY, array_of(ValueType::F32, v));
}
void Writer::set_i32s(const std::string& k, const std::vector<int32_t>& v) {
  put(k, ValueType::ARRAY, array_of(ValueType::I32, v));
}
void Writer::set_u32s(const std::string& k, const std::vector<uint32_t>& v) {
  put(k, ValueType::ARRAY, array_of(ValueType::U32, v));
}

void Writer::set_i32_arrays(const std::string& k, const std::vector<std::vector<int32_t>>& v) {
  std::vector<uint8_t> p;
  append<uint32_t>(p, static_cast<uint32_t>(ValueType::ARRAY));
  append<uint64_t>(p, v.size());
  for (const auto& inner : v) {
    auto a = array_of(ValueType::I32, inner);
    p.insert(p.end(), a.begin(), a.end());
  }
  put(k, ValueType::ARRAY, std::move(p));
}

void Writer::set_value(const std::string& k, const Value& v) {
  put(k, v.type(), std::vector<uint8_t>(v.raw(), v.raw() + v.raw_size()));
}

void Writer::remove(const std::string& key) {
  std::erase_if(kv_, [&](const Kv& kv) { return kv.key == key; });
}

void Writer::set_alignment(uint32_t a) {
  alignment_ = a;
  set_u32("general.alignment", a);
}

void Writer::add_tensor(const std::string& name, DType type, std::vector<int64_t> dims, Fill fill) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  const DTypeInfo& info = dtype_info(type);
  const uint64_t nbytes = static_cast<uint64_t>(n) / info.block_size * info.type_size;
  tensors_.push_back(Tensor{name, type, std::move(dims), nbytes, std::move(fill)});
}

void Writer::add_tensor(const std::string& name, DType type, std::vector<int64_t> dims,
                        std::vector<uint8_t> bytes) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add_tensor(name, type, std::move(dims), [shared](std::span<uint8_t> dst) {
    std::memcpy(dst.data(), shared->data(), std::min(dst.size(), shared->size()));
  });
}

std::vector<uint8_t> Writer::header(std::vector<uint64_t>& offsets) const {
  std::vector<uint8_t> h;
  append<uint32_t>(h, kMagic);
  append<uint32_t>(h, 3);
  append<uint64_t>(h, tensors_.size());
  append<uint64_t>(h, kv_.size());
  for (const Kv& kv : kv_) {
    append_str(h, kv.key);
    append<uint32_t>(h, kv.type);
    h.insert(h.end(), kv.payload.begin(), kv.payload.end());
  }
  uint64_t off = 0;
  offsets.clear();
  for (const Tensor& t : tensors_) {
    append_str(h, t.name);
    append<uint32_t>(h, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) append<uint64_t>(h, static_cast<uint64_t>(d));
    append<uint32_t>(h, static_cast<uint32_t>(t.type));
    append<uint64_t>(h, off);
    offsets.push_back(off);
    off += (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  h.resize((h.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  return h;
}

template <typename Sink>
void Writer::emit(Sink&& sink) const {
  std::vector<uint64_t> offsets;
  std::vector<uint8_t> h = header(offsets);
  sink(h.data(), h.size());
  std::vector<uint8_t> buf;
  for (const Tensor& t : tensors_) {
    const uint64_t padded = (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
    buf.assign(padded, 0);
    if (t.fill) t.fill(std::span<uint8_t>(buf.data(), t.nbytes));
    sink(buf.data(), buf.size());
  }
}

Status Writer::write(const std::string& path) const {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return make_error("{}: cannot create: {}", path, std::strerror(errno));
  bool ok = true;
  emit([&](const uint8_t* p, size_t n) {
    if (ok && n > 0 && std::fwrite(p, 1, n, f) != n) ok = false;
  });
  if (std::fclose(f) != 0) ok = false;
  if (!ok) return make_error("{}: write failed: {}", path, std::strerror(errno));
  return Status::Ok();
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out;
  emit([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
  return out;
}

}  // namespace edgelm::gguf
