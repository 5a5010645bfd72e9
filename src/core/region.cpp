#include "core/region.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/bytes.h"

namespace edgelm {

Region::~Region() {
  if (data_) munmap(data_, size_);
}

Region::Region(Region&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

Region& Region::operator=(Region&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

Result<Region> Region::map(size_t bytes, const std::string& what, bool lock) {
  Region r;
  if (bytes == 0) return r;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED)
    return make_error("cannot reserve {} for the {}: {}", format_bytes(bytes), what, std::strerror(errno));
  r.data_ = static_cast<uint8_t*>(p);
  r.size_ = bytes;
  if (lock && mlock(p, bytes) != 0)
    return make_error("cannot lock {} of {} in RAM (mlock: {}); raise RLIMIT_MEMLOCK or drop --mlock",
                      format_bytes(bytes), what, std::strerror(errno));
  return r;
}

}  // namespace edgelm
