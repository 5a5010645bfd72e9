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
    const int64_t groups = t->rows / 16;
    const TensorView src = *t;
    const uint64_t file_off = static_cast<uint64_t>(src.data - file.mapping().data());
    const size_t group_bytes = 16 * src.row_bytes;
    const size_t packed_group = kernels::packed_bytes(src.type, kernels::Layout::Interleave16, 16, src.cols);
    pool.run(pool.size(), [&](int task, int) {
      const int64_t per = (groups + pool.size() - 1) / pool.size();
      const int64_t g0 = task * per, g1 = std::min(groups, g0 + per);
      std::vector<uint8_t> rows(group_bytes);  // one group of rows, read from the file
      for (int64_t g = g0; g < g1 && !failed.load(); ++g) {
        size_t got = 0;
        while (got < group_bytes) {
          const ssize_t n = ::pread(fd, rows.data() + got, group_bytes - got,
                                    static_cast<off_t>(file_off + static_cast<uint64_t>(g) * group_bytes + got));
          if (n <= 0) {
            failed.store(true);
            return;
          }
          got += static_cast<size_t>(n);
        }
        // Packed groups follow one another: group g of the matrix is "group 0"
        // of these 16 rows, placed at its offset.
        kernels::pack_rows(src.type, kernels::Layout::Interleave16, rows.data(), dst + static_cast<size_t>(g) * packed_group,
                           src.cols, 0, 16);
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
