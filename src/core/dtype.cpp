#include "core/dtype.h"

#include <array>
#include <cstdlib>

namespace edgelm {
namespace {

constexpr size_t kMaxId = 40;
constexpr size_t QK_K = 256;

struct Entry {
  bool defined;
  DTypeInfo info;
};

// Block sizes and bytes per block, from the GGUF/ggml type table.
constexpr std::array<Entry, kMaxId> make_table() {
  std::array<Entry, kMaxId> t{};
  auto set = [&](DType d, std::string_view name, uint32_t bs, uint32_t ts, bool sup) {
    t[static_cast<size_t>(d)] = Entry{true, DTypeInfo{name, bs, ts, sup}};
  };
  set(DType::F32, "F32", 1, 4, true);
  set(DType::F16, "F16", 1, 2, true);
  set(DType::Q4_0, "Q4_0", 32, 2 + 16, true);
  set(DType::Q4_1, "Q4_1", 32, 2 + 2 + 16, true);
  set(DType::Q5_0, "Q5_0", 32, 2 + 4 + 16, true);
  set(DType::Q5_1, "Q5_1", 32, 2 + 2 + 4 + 16, true);
  set(DType::Q8_0, "Q8_0", 32, 2 + 32, true);
  set(DType::Q8_1, "Q8_1", 32, 4 + 32, false);
  set(DType::Q2_K, "Q2_K", QK_K, QK_K / 16 + QK_K / 4 + 2 + 2, true);
  set(DType::Q3_K, "Q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2, true);
  set(DType::Q4_K, "Q4_K", QK_K, 2 + 2 + 12 + QK_K / 2, true);
  set(DType::Q5_K, "Q5_K", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2, true);
  set(DType::Q6_K, "Q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, true);
  set(DType::Q8_K, "Q8_K", QK_K, 4 + QK_K + QK_K / 16 * 2, false);
  set(DType::IQ2_XXS, "IQ2_XXS", QK_K, 2 + QK_K / 8 * 2, false);
  set(DType::IQ2_XS, "IQ2_XS", QK_K, 2 + QK_K / 8 * 2 + QK_K / 32, false);
  set(DType::IQ3_XXS, "IQ3_XXS", QK_K, 2 + 3 * (QK_K / 8), false);
  set(DType::IQ1_S, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16, false);
  set(DType::IQ4_NL, "IQ4_NL", 32, 2 + 16, false);
  set(DType::IQ3_S, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4, false);
  set(DType::IQ2_S, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16, false);
  set(DType::IQ4_XS, "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64, false);
  set(DType::I8, "I8", 1, 1, false);
  set(DType::I16, "I16", 1, 2, false);
  set(DType::I32, "I32", 1, 4, false);
  set(DType::I64, "I64", 1, 8, false);
  set(DType::F64, "F64", 1, 8, false);
  set(DType::IQ1_M, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32, false);
  set(DType::BF16, "BF16", 1, 2, true);
  set(DType::TQ1_0, "TQ1_0", QK_K, 2 + 4 * 13, false);
  set(DType::TQ2_0, "TQ2_0", QK_K, 2 + 64, false);
  set(DType::MXFP4, "MXFP4", 32, 1 + 16, false);
  return t;
}

constexpr std::array<Entry, kMaxId> kTable = make_table();

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t id) {
  if (id >= kMaxId || !kTable[id].defined) return std::nullopt;
  return kTable[id].info;
}

const DTypeInfo& dtype_info(DType t) {
  const auto id = static_cast<size_t>(t);
  if (id >= kMaxId || !kTable[id].defined) std::abort();  // programming error, not data
  return kTable[id].info;
}

std::string_view dtype_name(DType t) { return dtype_info(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (size_t i = 0; i < kMaxId; ++i) {
    if (!kTable[i].defined) continue;
    std::string_view n = kTable[i].info.name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t k = 0; k < n.size(); ++k) {
      char a = n[k], b = name[k];
      if (b >= 'a' && b <= 'z') b = static_cast<char>(b - 'a' + 'A');
      if (a != b) eq = false;
    }
    if (eq) return static_cast<DType>(i);
  }
  return std::nullopt;
}

}  // namespace edgelm
