// Helpers shared by the tests: where the optional ../shared assets and the
// fetched vocab files are, and temporary files that clean up after themselves.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

// EDGELM_SANITIZED: built under AddressSanitizer or ThreadSanitizer. GCC
// defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang 14 answers
// __has_feature instead.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EDGELM_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define EDGELM_SANITIZED 1
#endif
#endif

namespace edgelm::test {

// ../shared/models beside the project root (override: EDGELM_SHARED_MODELS),
// or "" when absent.
std::string shared_models_dir();
// assets/vocab/ filled by scripts/fetch-test-assets.sh (override: EDGELM_VOCAB_DIR),
// or "" when absent.
std::string vocab_dir();

// A path in a per-process temporary folder, removed at exit.
std::string temp_path(const std::string& name);

// Polls `f` every 5 ms until it holds (true) or `seconds` pass (false).
inline bool wait_until(const std::function<bool()>& f, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!f()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}


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
