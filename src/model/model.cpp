#include "model/model.h"

#include <sys/mman.h>

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
  EDGELM_ASSIGN(packed, Region::map(total, "packed weights"));
  uint8_t* dst = packed.data();
  for (TensorView* t : todo) {
    const int64_t groups = t->rows / 16;
    const TensorView src = *t;
    pool.run(pool.size(), [&](int task, int) {
      const int64_t per = (groups + pool.size() - 1) / pool.size();
      const int64_t g0 = task * per, g1 = std::min(groups, g0 + per);
      if (g0 < g1) kernels::pack_rows(src.type, kernels::Layout::Interleave16, src.data, dst, src.cols, g0 * 16, g1 * 16);
    });
    // The copy replaces the file's pages: drop them from the process now, so
    // the peak is one tensor over the packed size, not the model twice.
    file.mapping().release(static_cast<size_t>(src.data - file.mapping().data()), src.bytes());
    t->data = dst;
    t->layout = kernels::Layout::Interleave16;
    dst += (kernels::packed_bytes(src.type, kernels::Layout::Interleave16, src.rows, src.cols) + 63) / 64 * 64;
  }
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
