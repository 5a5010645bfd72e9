// Synthetic models: real architectures and shapes with seeded random weights,
// written as GGUF files that edgelm and llama.cpp both load. Speed and memory
// do not depend on weight values, so these stand in for downloads in
// benchmarks and load tests; their text is noise.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/shapes.h"

namespace edgelm {

struct SynthOptions {
  std::string shape;          // a name from known_shapes()
  std::string ftype = "Q4_0"; // a name from known_ftypes()
  std::string vocab;          // GGUF whose tokenizer.* keys are copied; "" = a small built-in byte vocabulary
  std::string output;
  uint64_t seed = 42;
  int threads = 1;
};

// Writes the file; returns the model's parameter count.
Result<int64_t> write_synthetic_model(const SynthOptions& o);

}  // namespace edgelm
