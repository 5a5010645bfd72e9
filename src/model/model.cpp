#include "model/model.h"

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

int64_t Model::n_params() const {
  int64_t n = 0;
  for (const auto& t : file.tensors()) n += t.n_elements();
  return n;
}

}  // namespace edgelm
