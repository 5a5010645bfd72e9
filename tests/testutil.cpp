#include "testutil.h"

#include <unistd.h>

#include <cstdlib>

namespace edgelm::test {
namespace fs = std::filesystem;

std::string shared_models_dir() {
  if (const char* e = std::getenv("EDGELM_SHARED_MODELS")) return fs::exists(e) ? e : "";
  fs::path p = fs::path(EDGELM_SOURCE_DIR) / ".." / "shared" / "models";
  return fs::exists(p) ? fs::canonical(p).string() : "";
}

std::string vocab_dir() {
  if (const char* e = std::getenv("EDGELM_VOCAB_DIR")) return fs::exists(e) ? e : "";
  fs::path p = fs::path(EDGELM_SOURCE_DIR) / "assets" / "vocab";
  return fs::exists(p) ? p.string() : "";
}

namespace {
struct TempDir {
  fs::path dir;
  TempDir() {
    dir = fs::temp_directory_path() / ("edgelm-test-" + std::to_string(getpid()));
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};
}  // namespace

std::string temp_path(const std::string& name) {
  static TempDir d;
  return (d.dir / name).string();
}

}  // namespace edgelm::test
