// A read-only memory mapping of a whole file. Weights are read straight from
// these pages: the kernel pages them in on first touch and may drop them under
// pressure, so a model costs no heap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace edgelm {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static Result<MappedFile> open(const std::string& path);
  // Maps caller-owned bytes (tests, fuzzing): no file, no ownership.
  static MappedFile view(const uint8_t* data, size_t size);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Pins the pages in RAM (mlock). Fails without CAP_IPC_LOCK / RLIMIT_MEMLOCK.
  Status lock() const;
  // Advises the kernel that the range will be read soon.
  void prefetch(size_t offset, size_t len) const;
  // Drops the range's pages from this process (they stay in the page cache,
  // reclaimable, until the kernel needs the memory): for data copied elsewhere.
  void release(size_t offset, size_t len) const;
  // Pins a range in RAM (mlock).
  Status lock_range(size_t offset, size_t len) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owned_ = false;
  std::string path_;
};

}  // namespace edgelm
