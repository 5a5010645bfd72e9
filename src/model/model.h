// A loaded model: the mapped file, its configuration and the weight views.
#pragma once

#include <memory>
#include <string>

#include "core/region.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/weights.h"

namespace edgelm {

struct Model {
  gguf::File file;
  ModelConfig config;
  ModelWeights weights;

  // Opens, validates metadata and binds every tensor; errors name the problem.
  static Result<std::unique_ptr<Model>> load(const std::string& path);
  static Result<std::unique_ptr<Model>> from_file(gguf::File file);

  // Parameters: elements of all bound weight tensors.
  int64_t n_params() const;

  // Repacks every matrix that `isa`'s kernels run faster in another layout
  // (kernels::preferred_layout) into one anonymous region, and drops the
  // file's pages of those tensors from the process: the packed copy replaces
  // them, the same number of bytes. Once only. Returns the bytes packed.
  Result<uint64_t> pack_for(kernels::Isa isa, ThreadPool& pool);
  // Pins the weights in RAM: the packed region and the still-mapped tensors.
  Status lock_weights() const;

  Region packed;  // packed copies of some matrices (empty when none)
};

}  // namespace edgelm
