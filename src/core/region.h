// A block of anonymous memory mapped once, made resident at once (every page
// is written before map() returns, so the plan's figure is real from the
// start rather than growing as the cache fills), optionally locked. Regions
// of 2 MiB or more start on a 2 MiB boundary and ask for transparent huge
// pages (madvise), which the kernel gives where it has them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace edgelm {

class Region {
 public:
  Region() = default;
  ~Region();
  Region(Region&& o) noexcept;
  Region& operator=(Region&& o) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  // `what` names the region in errors ("KV cache").
  static Result<Region> map(size_t bytes, const std::string& what, bool lock = false);

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace edgelm
