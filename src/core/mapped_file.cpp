#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace edgelm {

MappedFile::~MappedFile() {
  if (owned_ && data_ != nullptr && size_ > 0) munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      owned_(std::exchange(o.owned_, false)),
      path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    this->~MappedFile();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    owned_ = std::exchange(o.owned_, false);
    path_ = std::move(o.path_);
  }
  return *this;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return make_error("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error("{}: not a regular file", path);
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = mmap(nullptr, f.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return make_error("{}: cannot mmap: {}", path, std::strerror(e));
    }
    f.data_ = static_cast<const uint8_t*>(p);
    f.owned_ = true;
  }
  ::close(fd);
  return f;
}

MappedFile MappedFile::view(const uint8_t* data, size_t size) {
  MappedFile f;
  f.data_ = data;
  f.size_ = size;
  f.owned_ = false;
  f.path_ = "<memory>";
  return f;
}

Status MappedFile::lock() const {
  if (size_ == 0) return Status::Ok();
  if (mlock(data_, size_) != 0)
    return make_error("{}: mlock of {} bytes failed: {}", path_, size_, std::strerror(errno));
  return Status::Ok();
}

void MappedFile::release(size_t offset, size_t len) const {
  if (!owned_ || offset >= size_) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Only whole pages inside the range: a neighbour's data may share the edges.
  const size_t start = (offset + page - 1) / page * page;
  const size_t end = std::min(size_, offset + len) / page * page;
  if (end > start) madvise(const_cast<uint8_t*>(data_) + start, end - start, MADV_DONTNEED);
}

Status MappedFile::lock_range(size_t offset, size_t len) const {
  if (len == 0 || offset >= size_) return Status::Ok();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t start = offset / page * page;
  const size_t end = std::min(size_, offset + len);
  if (mlock(data_ + start, end - start) != 0)
    return make_error("{}: mlock of {} bytes failed: {}", path_, end - start, std::strerror(errno));
  return Status::Ok();
}

void MappedFile::prefetch(size_t offset, size_t len) const {
  if (!owned_ || offset >= size_) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t start = offset / page * page;
  size_t end = std::min(size_, offset + len);
  madvise(const_cast<uint8_t*>(data_) + start, end - start, MADV_WILLNEED);
}

}  // namespace edgelm
