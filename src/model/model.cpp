#include "model/model.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace edgelm {

Result<std::unique_ptr<Model>> Model::load(const std::string& path) {
  EDGELM_ASSIGN(gguf::File f, gguf::File::open(path));
  return from_file(std::move(f));
}

Result<std::unique_ptr<Model>> Model::from_file(gguf::File file) {
  auto m = std::make_unique<Model>();
  m->file = std::move(file);
  EDGELM_ASSIGN(m->config, load_config(m->file));
  EDGELM_ASSIGN(m->weights, bind_weights(m->file, m->config));
  return m;
}

namespace {

// Every matrix the forward pass multiplies by, each once (a tied output is
// the embedding itself).
std::vector<TensorView*> matrices(ModelWeights& w) {
  std::vector<TensorView*> v;
  for (LayerWeights& l : w.layers)
    for (TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) v.push_back(t);
  v.push_back(&w.output);
  return v;
}

}  // namespace

Result<uint64_t> Model::pack_for(kernels::Isa isa, ThreadPool& pool) {
  if (packed.size() > 0) return make_error("weights are already packed");
  const bool tied = weights.output.data == weights.token_embd.data;
  std::vector<TensorView*> todo;
  size_t total = 0;
  for (TensorView* t : matrices(weights)) {
    if (kernels::preferred_layout(isa, t->type, t->rows, t->cols) == kernels::Layout::Rows) continue;
    todo.push_back(t);
    total += (kernels::packed_bytes(t->type, kernels::Layout::Interleave16, t->rows, t->cols) + 63) / 64 * 64;
  }
  if (todo.empty()) return uint64_t{0};
  // The small vectors (norms, biases) move too: they sit between the big
  // tensors in the file, and touching one through the mapping would map the
  // large page-cache folio around it, neighbours' data included.
  std::vector<TensorView*> vectors;
  for (LayerWeights& l : weights.layers)
    for (TensorView* t : {&l.attn_norm, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm, &l.ffn_norm})
      if (t->present()) vectors.push_back(t);
  for (TensorView* t : {&weights.output_norm, &weights.rope_freqs})
    if (t->present()) vectors.push_back(t);
  for (TensorView* t : vectors) total += (t->bytes() + 63) / 64 * 64;
  EDGELM_ASSIGN(packed, Region::map(total, "packed weights"));
  // Read the tensors with pread, a row group at a time, rather than through
  // the mapping: their file pages never become part of this process (with
  // large folios, dropping a mapped range afterwards can leave its edges
  // resident), and the page cache is told it may drop them.
  const int fd = ::open(file.path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("{}: cannot reopen for packing: {}", file.path(), std::strerror(errno));
  uint8_t* dst = packed.data();
  std::atomic<bool> failed{false};
  for (TensorView* t : todo) {
    // In units of two 16-row groups (the 32-element formats store their
    // groups in pairs, pack.cpp); a last unit of one group if the count is odd.
    const int64_t groups = t->rows / 16, units = (groups + 1) / 2;
    const TensorView src = *t;
    const uint64_t file_off = static_cast<uint64_t>(src.data - file.mapping().data());
    const size_t unit_bytes = 32 * src.row_bytes;
    const size_t packed_unit =
        kernels::packed_bytes(src.type, kernels::Layout::Interleave16, 32, src.cols);
    pool.run(pool.size(), [&](int task, int) {
      const int64_t per = (units + pool.size() - 1) / pool.size();
      const int64_t u0 = task * per, u1 = std::min(units, u0 + per);
      std::vector<uint8_t> rows(unit_bytes);  // one unit of rows, read from the file
      for (int64_t u = u0; u < u1 && !failed.load(); ++u) {
        const int64_t n_rows = std::min<int64_t>(32, 16 * groups - 32 * u);
        const size_t want = static_cast<size_t>(n_rows) * src.row_bytes;
        size_t got = 0;
        while (got < want) {
          const ssize_t n =
              ::pread(fd, rows.data() + got, want - got,
                      static_cast<off_t>(file_off + static_cast<uint64_t>(u) * unit_bytes + got));
          if (n <= 0) {
            failed.store(true);
            return;
          }
          got += static_cast<size_t>(n);
        }
        // Packed units follow one another: unit u of the matrix is rows
        // [0, n_rows) of a matrix of these rows, placed at its offset.
        kernels::pack_rows(src.type, kernels::Layout::Interleave16, rows.data(),
                           dst + static_cast<size_t>(u) * packed_unit, src.cols, 0, n_rows);
      }
    });
    if (failed.load()) break;
    posix_fadvise(fd, static_cast<off_t>(file_off), static_cast<off_t>(src.bytes()), POSIX_FADV_DONTNEED);
    t->data = dst;
    t->layout = kernels::Layout::Interleave16;
    dst += (kernels::packed_bytes(src.type, kernels::Layout::Interleave16, src.rows, src.cols) + 63) / 64 * 64;
  }
  for (TensorView* t : vectors) {
    if (failed.load()) break;
    const uint64_t off = static_cast<uint64_t>(t->data - file.mapping().data());
    if (::pread(fd, dst, t->bytes(), static_cast<off_t>(off)) != static_cast<ssize_t>(t->bytes())) failed.store(true);
    t->data = dst;
    dst += (t->bytes() + 63) / 64 * 64;
  }
  ::close(fd);
  if (failed.load()) return make_error("{}: read error while packing the weights", file.path());
  if (tied) weights.token_embd = weights.output;  // lookups read rows back from the packed layout
  return static_cast<uint64_t>(total);
}

Status Model::lock_weights() const {
  if (packed.size() > 0 && mlock(packed.data(), packed.size()) != 0)
    return make_error("cannot lock the packed weights in RAM: {}", std::strerror(errno));
  for (const auto& t : file.tensors()) {
    const uint8_t* p = file.tensor_data(t);
    bool moved = false;
    const TensorView* views[] = {&weights.token_embd, &weights.output};
    for (const TensorView* v : views) moved |= v->name == t.name && v->data != p;
    for (const LayerWeights& l : weights.layers)
      for (const TensorView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        moved |= v->name == t.name && v->data != p;
    if (!moved) EDGELM_TRY(file.mapping().lock_range(static_cast<size_t>(p - file.mapping().data()), t.nbytes));
  }
  return Status::Ok();
}

int64_t Model::n_params() const {
  int64_t n = 0;
  for (const auto& t : file.tensors()) n += t.n_elements();
  return n;
}

}  // namespace edgelm
