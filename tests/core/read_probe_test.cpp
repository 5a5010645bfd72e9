#include "core/read_probe.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/region.h"

namespace edgelm {
namespace {

// 64-bit loads sum the buffer's words, so the threads' parts of a pass add
// up to the whole buffer exactly when they cover every byte once: one share
// per thread, or 256 KiB chunks in turn with a short last chunk.
TEST(ReadProbe, SharesCoverTheBufferOnce) {
  const size_t bytes = 3 * 256 * 1024 + 5 * 256 * 6;  // not a multiple of the chunk
  auto r = Region::map(bytes, "read probe test");
  ASSERT_TRUE(r.ok()) << r.message();
  std::vector<uint64_t> words(bytes / 8);
  uint64_t whole = 0;
  for (size_t i = 0; i < words.size(); ++i) {
    words[i] = i * 2654435761u + 7;
    whole += words[i];
  }
  std::memcpy(r->data(), words.data(), bytes);
  for (int threads : {1, 2, 3}) {
    for (bool chunks : {false, true}) {
      uint64_t sum = 0;
      for (int t = 0; t < threads; ++t)
        sum += read_share(ReadMethod::Scalar, chunks, r->data(), bytes, t, threads);
      EXPECT_EQ(sum, whole) << threads << " threads, chunks " << chunks;
    }
  }
}

TEST(ReadProbe, PassBytesAreWholeStepsPerThread) {
  EXPECT_EQ(read_pass_bytes(1000, 1), 768u);
  EXPECT_EQ(read_pass_bytes(1000, 2), 512u);
  EXPECT_EQ(read_pass_bytes(1000, 3), 768u);
  EXPECT_EQ(read_pass_bytes(1000, 4), 0u);
  EXPECT_EQ(read_pass_bytes(1 << 20, 2), size_t{1} << 20);
  EXPECT_EQ(read_pass_bytes(1000, 0), 768u);  // no threads counts as one
}

TEST(ReadProbe, ReportsEveryMethodAndTheBest) {
  const size_t bytes = 1 << 20;
  auto r = Region::map(bytes, "read probe test");
  ASSERT_TRUE(r.ok()) << r.message();
  std::memset(r->data(), 1, bytes);
  const BandwidthResult res = probe_read(r->data(), bytes, 2);
  ASSERT_EQ(res.all.size(), 2 * read_methods().size());  // one share per thread, chunks in turn
  double best = 0;
  for (const auto& [name, gbs] : res.all) {
    EXPECT_GT(gbs, 0) << name;
    best = std::max(best, gbs);
  }
  EXPECT_EQ(res.best_gbs, best);
  EXPECT_NE(res.best.find(read_method_name(res.best_method)), std::string::npos) << res.best;
  EXPECT_NE(res.best.find(res.best_chunks ? "chunks in turn" : "one share per thread"),
            std::string::npos)
      << res.best;
  // Nothing to read: no result.
  EXPECT_EQ(probe_read(r->data(), 100, 2).all.size(), 0u);
}

}  // namespace
}  // namespace edgelm
