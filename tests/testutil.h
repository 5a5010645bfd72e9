// Helpers shared by the tests: where the optional ../shared assets and the
// fetched vocab files are, and temporary files that clean up after themselves.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace edgelm::test {

// ../shared/models beside the project root (override: EDGELM_SHARED_MODELS),
// or "" when absent.
std::string shared_models_dir();
// assets/vocab/ filled by scripts/fetch-test-assets.sh (override: EDGELM_VOCAB_DIR),
// or "" when absent.
std::string vocab_dir();

// A path in a per-process temporary folder, removed at exit.
std::string temp_path(const std::string& name);

}  // namespace edgelm::test

// Skips the current test with a clear message when a shared model file is missing.
#define EDGELM_REQUIRE_SHARED(var, relpath)                                                  \
  std::string var;                                                                           \
  do {                                                                                       \
    std::string dir_ = ::edgelm::test::shared_models_dir();                                  \
    if (dir_.empty() || !std::filesystem::exists(dir_ + "/" + (relpath)))                    \
      GTEST_SKIP() << "../shared/models/" << (relpath) << " not present; skipping";          \
    var = dir_ + "/" + (relpath);                                                            \
  } while (0)

#define EDGELM_REQUIRE_VOCAB(var, name)                                                       \
  std::string var;                                                                            \
  do {                                                                                        \
    std::string dir_ = ::edgelm::test::vocab_dir();                                           \
    if (dir_.empty() || !std::filesystem::exists(dir_ + "/" + (name)))                       \
      GTEST_SKIP() << "assets/vocab/" << (name)                                               \
                   << " not present (run scripts/fetch-test-assets.sh); skipping";           \
    var = dir_ + "/" + (name);                                                                \
  } while (0)
