// A loaded model: the mapped file, its configuration and the weight views.
#pragma once

#include <memory>
#include <string>

#include "gguf/gguf.h"
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
};

}  // namespace edgelm
