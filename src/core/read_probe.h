// Memory read bandwidth: how fast this machine reads a buffer, by the best
// of several ways to read it (edgelm bench --bandwidth, the decode
// benchmarks). A single way can fall short of what the memory gives (one
// stream per core may not keep enough misses in flight; 32-byte loads may
// retire slower than 64-byte ones), and then "percent of the limit" would
// flatter the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgelm {

// How a pass reads its bytes.
enum class ReadMethod { Avx2, Avx512, Avx512Prefetch, Avx512Stream, Scalar };

std::string_view read_method_name(ReadMethod m);

// The methods this CPU can run.
std::vector<ReadMethod> read_methods();

// Sums n bytes at p (p 64-byte aligned, n a multiple of 256) with method m,
// so that the loads, not the adds, limit it.
uint64_t sum_bytes(ReadMethod m, const uint8_t* p, size_t n);

// The bytes of an n-byte buffer a pass of `threads` threads reads: n rounded
// down to a multiple of 256 x threads (every share a whole number of
// sum_bytes' 256-byte steps).
size_t read_pass_bytes(size_t n, int threads);

// Thread t's part of a pass of `threads` threads over [p, p + bytes) (bytes
// as read_pass_bytes gives): one contiguous share, or (chunks) every
// threads-th 256 KiB chunk from the t-th. Returns the sum.
uint64_t read_share(ReadMethod m, bool chunks, const uint8_t* p, size_t bytes, int t, int threads);

struct BandwidthResult {
  double best_gbs = 0;
  std::string best;  // the method and split that gave it
  ReadMethod best_method = ReadMethod::Scalar;
  bool best_chunks = false;
  std::vector<std::pair<std::string, double>> all;  // every (method, split): best pass in GB/s
};

// Read bandwidth with `threads` threads over [p, p + bytes) (p 64-byte
// aligned; a tail short of 256 bytes a thread is left out): each method,
// with each thread reading one contiguous share or the threads taking turns
// over 256 KiB chunks (as a matrix product's row chunks do); the best of 4
// passes of each counts, and the best way is the result. The threads are
// started once and wait at a spinning barrier, so no thread start is timed.
BandwidthResult probe_read(const uint8_t* p, size_t bytes, int threads);

// One way of probe_read's (method m, chunks or one share per thread) over
// the same kind of buffer: the best of `passes` passes in GB/s; 0 when
// there is nothing to read or no pass. For a read limit taken right beside
// a measurement it is compared with, in the same phase of a shared host.
double read_gbs(ReadMethod m, bool chunks, const uint8_t* p, size_t bytes, int threads, int passes);

}  // namespace edgelm
