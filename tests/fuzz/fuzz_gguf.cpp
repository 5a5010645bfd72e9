// libFuzzer target for the GGUF reader: any bytes either parse into a file
// whose every tensor lies inside the input, or give one error line. Accepted
// files are walked completely (every metadata value formatted, every array
// element read) so that a view past the end would be touched here.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "gguf/gguf.h"

namespace {

void walk(const edgelm::gguf::Value& v, int depth) {
  (void)edgelm::gguf::format_value(v);
  if (!v.is_array() || depth > 8) return;
  for (uint64_t i = 0; i < v.size(); ++i) {
    switch (v.elem_type()) {
      case edgelm::gguf::ValueType::STRING: (void)v.string_at(i); break;
      case edgelm::gguf::ValueType::ARRAY: walk(v.array_at(i), depth + 1); break;
      default:
        (void)v.int_at(i);
        (void)v.float_at(i);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = edgelm::gguf::File::parse(edgelm::MappedFile::view(data, size));
  if (!f.ok()) {
    if (f.message().empty() || f.message().find('\n') != std::string::npos) std::abort();
    return 0;
  }
  for (const auto& kv : f->metadata()) walk(kv.value, 0);
  uint64_t sum = 0;
  for (const auto& t : f->tensors()) {
    if (f->data_offset() + t.offset + t.nbytes > size) std::abort();
    if (t.nbytes > 0) sum += f->tensor_data(t)[t.nbytes - 1];
  }
  return static_cast<int>(sum & 0);
}
