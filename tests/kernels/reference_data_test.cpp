// Dequantization against llama.cpp's reference dequantizer on real files:
// ../shared/models/types/llama256-*.gguf and dequant.json (see that folder's
// README). Skipped when the shared folder is absent.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "testutil.h"

namespace edgelm::kernels {
namespace {

TEST(ReferenceData, DequantizeMatchesLlamaCpp) {
  EDGELM_REQUIRE_SHARED(json_path, "types/dequant.json");
  std::ifstream in(json_path);
  ASSERT_TRUE(in) << json_path;
  const nlohmann::json ref = nlohmann::json::parse(in);
  const std::string dir = json_path.substr(0, json_path.rfind('/'));

  int tensors_checked = 0;
  std::set<std::string> types_seen;
  for (const auto& [file_name, tensors] : ref.items()) {
    auto file = gguf::File::open(dir + "/" + file_name);
    ASSERT_TRUE(file.ok()) << file_name << ": " << file.message();
    for (const auto& [tensor_name, want] : tensors.items()) {
      SCOPED_TRACE(file_name + " " + tensor_name);
      const gguf::TensorInfo* info = file->find_tensor(tensor_name);
      ASSERT_NE(info, nullptr);
      ASSERT_EQ(dtype_name(info->type), want.at("type").get<std::string>());
      ASSERT_EQ(info->ne[0], want.at("shape")[0].get<int64_t>());
      ASSERT_TRUE(dtype_info(info->type).engine_supported);
      types_seen.insert(want.at("type").get<std::string>());

      const int64_t row = info->ne[0];
      const int64_t rows = info->n_elements() / row;
      const size_t rb = row_bytes(info->type, row);
      const uint8_t* data = file->tensor_data(*info);
      std::vector<float> values(static_cast<size_t>(info->n_elements()));
      for (int64_t r = 0; r < rows; ++r)
        dequantize_row(info->type, data + r * rb, values.data() + r * row, row);

      // The JSON prints 7 significant digits; dequantized values are exact
      // products of a few floats, so they agree to that precision.
      const auto& first = want.at("first256");
      ASSERT_EQ(first.size(), std::min<size_t>(256, values.size()));
      for (size_t i = 0; i < first.size(); ++i) {
        const double w = first[i].get<double>();
        ASSERT_NEAR(values[i], w, 1e-6 * std::fabs(w) + 1e-12) << "element " << i;
      }
      double sum = 0, sumsq = 0, abs_sum = 0;
      for (float v : values) {
        sum += v;
        sumsq += static_cast<double>(v) * v;
        abs_sum += std::fabs(v);
      }
      // A one-ulp difference per value (e.g. llama.cpp's build fusing d*q - m
      // into an FMA) moves the sums by at most ~6e-8 of their absolute mass.
      EXPECT_NEAR(sum, want.at("sum").get<double>(), 1e-7 * abs_sum + 1e-9);
      EXPECT_NEAR(sumsq, want.at("sumsq").get<double>(), 2e-7 * sumsq + 1e-9);
      ++tensors_checked;
    }
  }
  EXPECT_GT(tensors_checked, 100);
  // Every format the engine reads from files occurs in the reference set.
  for (const char* t : {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K",
                        "Q4_K", "Q5_K", "Q6_K"}) {
    EXPECT_TRUE(types_seen.count(t)) << t;
  }
  RecordProperty("tensors_checked", tensors_checked);
}

}  // namespace
}  // namespace edgelm::kernels
