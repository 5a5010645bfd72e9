// The corpus test: every chat template of llama.cpp's models/templates/
// (assets/templates/, from scripts/fetch-test-assets.sh) rendered on each
// conversation of conversations.json, by edgelm and by Python's jinja2
// (jinja_oracle.py), compared byte for byte.
//
// A template passes when, on every conversation, both render the same
// bytes, or both fail (and a raise_exception message is the same). It is
// wrong, and the test fails, when edgelm renders something else than jinja2
// or renders where jinja2 fails. When edgelm fails where jinja2 renders,
// the template is unsupported: allowed (the server then reports the error),
// listed in the summary. At least 50 templates must render identically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "template/template.h"

namespace edgelm::jinja {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q.push_back(c);
  }
  return q + "'";
}

// Runs a command, returns its stdout (and exit status in *status).
std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

fs::path templates_dir() {
  if (const char* e = std::getenv("EDGELM_TEMPLATES_DIR")) return e;
  return fs::path(EDGELM_SOURCE_DIR) / "assets" / "templates";
}

std::string first_line(const std::string& s) { return s.substr(0, std::min(s.find('\n'), size_t{160})); }

TEST(Corpus, MatchesJinja2) {
  const fs::path dir = templates_dir();
  const fs::path here = fs::path(EDGELM_SOURCE_DIR) / "tests" / "template";
  const fs::path oracle = here / "jinja_oracle.py";
  // EDGELM_TEMPLATE_CONVERSATIONS: another conversations file (same format).
  const char* convs_env = std::getenv("EDGELM_TEMPLATE_CONVERSATIONS");
  const fs::path convs_path = convs_env ? fs::path(convs_env) : here / "conversations.json";
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".jinja") files.push_back(e.path());
  if (files.empty()) GTEST_SKIP() << dir << " has no templates (run scripts/fetch-test-assets.sh); skipping";
  if (std::system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with jinja2 not available (apt-get install python3-jinja2); skipping";
  std::sort(files.begin(), files.end());

  auto convs = parse_json(read_file(convs_path));
  ASSERT_TRUE(convs.ok()) << convs.message();
  ASSERT_TRUE(convs->is_list());

  RenderOptions opt;
  opt.now_unix = 1721995200;  // 2024-07-26 12:00:00 UTC, the oracle's clock

  int identical = 0, both_reject = 0;
  std::vector<std::string> unsupported, wrong;
  for (const auto& file : files) {
    const std::string name = file.filename().string();
    int status = 0;
    const std::string out =
        run("python3 " + shell_quote(oracle.string()) + " " + shell_quote(file.string()) + " " +
                shell_quote(convs_path.string()),
            &status);
    auto want = parse_json(out);
    ASSERT_TRUE(status == 0 && want.ok() && want->is_list() && want->items().size() == convs->items().size())
        << "oracle failed on " << name;

    auto tmpl = Template::parse(read_file(file));
    bool all_match = true, any_rendered = false;
    std::string our_failure;
    for (size_t i = 0; i < convs->items().size(); ++i) {
      const Value& conv = convs->items()[i];
      const Value& w = want->items()[i];
      const std::string case_name = conv.get("name")->str();
      const bool w_ok = w.get("ok")->as_bool();
      Result<std::string> got = tmpl.ok() ? tmpl->render(*conv.get("context"), opt)
                                          : Result<std::string>(Error{"parse: " + tmpl.message()});
      if (w_ok) any_rendered = true;
      if (w_ok && got.ok()) {
        if (*got != w.get("output")->str()) {
          all_match = false;
          wrong.push_back(name + " [" + case_name + "]: output differs");
          ADD_FAILURE() << name << " [" << case_name << "]: output differs\n--- jinja2:\n"
                        << w.get("output")->str() << "\n--- edgelm:\n" << *got;
        }
      } else if (w_ok) {
        all_match = false;
        if (our_failure.empty()) our_failure = "[" + case_name + "] " + first_line(got.message());
      } else if (got.ok()) {
        all_match = false;
        wrong.push_back(name + " [" + case_name + "]: jinja2 fails, edgelm renders");
        ADD_FAILURE() << name << " [" << case_name << "]: jinja2 fails (" << w.get("error")->str()
                      << ") but edgelm renders:\n" << *got;
      } else if (w.get("kind")->str() == "raise" && got.message() != w.get("error")->str()) {
        all_match = false;
        wrong.push_back(name + " [" + case_name + "]: raise_exception message differs");
        ADD_FAILURE() << name << " [" << case_name << "]: raise_exception message differs: jinja2 '"
                      << w.get("error")->str() << "', edgelm '" << got.message() << "'";
      }
    }
    if (all_match && any_rendered) ++identical;
    else if (all_match) ++both_reject;
    else if (!our_failure.empty()) unsupported.push_back(name + ": " + our_failure);
  }
  std::cout << "corpus: " << files.size() << " templates, " << identical << " identical to jinja2 on all "
            << convs->items().size() << " conversations, " << both_reject << " rejected by both, "
            << unsupported.size() << " unsupported by edgelm, " << wrong.size() << " wrong renders\n";
  for (const auto& u : unsupported) std::cout << "  unsupported: " << u << "\n";
  EXPECT_GE(identical, 50);
}

}  // namespace
}  // namespace edgelm::jinja
