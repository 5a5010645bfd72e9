#include "core/region.h"

#include <sys/mman.h>
#include <unistd.h>

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

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

constexpr size_t kHugePage = 2 * kMiB;

// Makes [p, p + bytes) resident by writing to it: one call where the kernel
// has MADV_POPULATE_WRITE, else a write to every page.
bool populate(uint8_t* p, size_t bytes, size_t page) {
  if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return true;
  if (errno != EINVAL) return false;  // ENOMEM and the like: it cannot be made resident
  for (size_t i = 0; i < bytes; i += page) static_cast<volatile uint8_t*>(p)[i] = 0;
  return true;
}

}  // namespace

Result<Region> Region::map(size_t bytes, const std::string& what, bool lock) {
  Region r;
  if (bytes == 0) return r;
  // A region of 2 MiB or more starts on a 2 MiB boundary and asks for
  // transparent huge pages before it is made resident: the weights and the
  // KV cache are read whole at every step, and one TLB entry then covers 2 MiB
  // instead of 4 KiB. Where the kernel has no huge pages to give (THP off, or
  // memory too fragmented), the same region is made of base pages.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));  // 4, 16 or 64 KiB on arm64 kernels
  const bool huge = bytes >= kHugePage;
  const size_t reserve = huge ? bytes + kHugePage : bytes;
  void* p = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return make_error("cannot reserve {} for the {}: {}", format_bytes(bytes), what, std::strerror(errno));
  auto* base = static_cast<uint8_t*>(p);
  uint8_t* data = base;
  if (huge) {
    const auto addr = reinterpret_cast<uintptr_t>(base);
    data = base + ((kHugePage - addr % kHugePage) % kHugePage);
    const size_t used = (bytes + page - 1) / page * page;
    if (data > base) munmap(base, static_cast<size_t>(data - base));
    if (base + reserve > data + used) munmap(data + used, static_cast<size_t>(base + reserve - (data + used)));
    madvise(data, bytes, MADV_HUGEPAGE);  // advice only: EINVAL where THP is not built in
  }
  r.data_ = data;
  r.size_ = bytes;
  if (!populate(data, bytes, page))
    return make_error("cannot make {} of {} resident: {}", format_bytes(bytes), what, std::strerror(errno));
  if (lock && mlock(data, bytes) != 0)
    return make_error("cannot lock {} of {} in RAM (mlock: {}); raise RLIMIT_MEMLOCK or drop --mlock",
                      format_bytes(bytes), what, std::strerror(errno));
  return r;
}

}  // namespace edgelm
