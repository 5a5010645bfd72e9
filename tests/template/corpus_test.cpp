// Differential tests against Python's jinja2 (jinja_oracle.py).
//
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

// What a set of templates gave, compared with jinja2.
struct Tally {
  int identical = 0;    // same bytes (or both fail) on every conversation, one render at least
  int both_reject = 0;  // jinja2 and edgelm fail on every conversation
  std::vector<std::string> unsupported;  // edgelm fails where jinja2 renders
  std::vector<std::string> wrong;        // edgelm renders other bytes, or renders where jinja2 fails
};

// Renders `source` on each conversation and compares with the oracle's
// results (`want`, one entry per conversation).
void compare(const std::string& name, std::string_view source, const Value& convs, const Value& want, Tally& tally) {
  RenderOptions opt;
  opt.now_unix = 1721995200;  // 2024-07-26 12:00:00 UTC, the oracle's clock
  auto tmpl = Template::parse(source);
  bool all_match = true, any_rendered = false;
  std::string our_failure;
  for (size_t i = 0; i < convs.items().size(); ++i) {
    const Value& conv = convs.items()[i];
    const Value& w = want.items()[i];
    const std::string where = name + " [" + conv.get("name")->str() + "]";
    const bool w_ok = w.get("ok")->as_bool();
    Result<std::string> got = tmpl.ok() ? tmpl->render(*conv.get("context"), opt)
                                        : Result<std::string>(Error{"parse: " + tmpl.message()});
    if (w_ok) any_rendered = true;
    if (w_ok && got.ok()) {
      if (*got != w.get("output")->str()) {
        all_match = false;
        tally.wrong.push_back(where + ": output differs");
        ADD_FAILURE() << where << ": output differs\n--- jinja2:\n"
                      << w.get("output")->str() << "\n--- edgelm:\n" << *got;
      }
    } else if (w_ok) {
      all_match = false;
      if (our_failure.empty()) our_failure = "[" + conv.get("name")->str() + "] " + first_line(got.message());
    } else if (got.ok()) {
      all_match = false;
      tally.wrong.push_back(where + ": jinja2 fails, edgelm renders");
      ADD_FAILURE() << where << ": jinja2 fails (" << w.get("error")->str() << ") but edgelm renders:\n" << *got;
    } else if (w.get("kind")->str() == "raise" && got.message() != w.get("error")->str()) {
      all_match = false;
      tally.wrong.push_back(where + ": raise_exception message differs");
      ADD_FAILURE() << where << ": raise_exception message differs: jinja2 '" << w.get("error")->str()
                    << "', edgelm '" << got.message() << "'";
    }
  }
  if (all_match && any_rendered) ++tally.identical;
  else if (all_match) ++tally.both_reject;
  else if (!our_failure.empty()) tally.unsupported.push_back(name + ": " + our_failure);
}

void report(const std::string& what, size_t n_templates, size_t n_convs, const Tally& t) {
  std::cout << what << ": " << n_templates << " templates, " << t.identical << " identical to jinja2 on all " << n_convs
            << " conversations, " << t.both_reject << " rejected by both, " << t.unsupported.size()
            << " unsupported by edgelm, " << t.wrong.size() << " wrong renders\n";
  for (const auto& u : t.unsupported) std::cout << "  unsupported: " << u << "\n";
}

// The oracle's interpreter: Debian's python3 (with python3-jinja2, which
// install-deps.sh installs) when it has jinja2, else whichever python3 is
// first on PATH.
const std::string& python() {
  static const std::string p =
      std::system("/usr/bin/python3 -c 'import jinja2' >/dev/null 2>&1") == 0 ? "/usr/bin/python3" : "python3";
  return p;
}

bool have_jinja2() { return std::system((python() + " -c 'import jinja2' >/dev/null 2>&1").c_str()) == 0; }

const fs::path kHere = fs::path(EDGELM_SOURCE_DIR) / "tests" / "template";

TEST(Corpus, MatchesJinja2) {
  const fs::path dir = templates_dir();
  const fs::path oracle = kHere / "jinja_oracle.py";
  // EDGELM_TEMPLATE_CONVERSATIONS: another conversations file (same format).
  const char* convs_env = std::getenv("EDGELM_TEMPLATE_CONVERSATIONS");
  const fs::path convs_path = convs_env ? fs::path(convs_env) : kHere / "conversations.json";
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".jinja") files.push_back(e.path());
  if (files.empty()) GTEST_SKIP() << dir << " has no templates (run scripts/fetch-test-assets.sh); skipping";
  if (!have_jinja2()) GTEST_SKIP() << "python3 with jinja2 not available (apt-get install python3-jinja2); skipping";
  std::sort(files.begin(), files.end());

  auto convs = parse_json(read_file(convs_path));
  ASSERT_TRUE(convs.ok()) << convs.message();
  ASSERT_TRUE(convs->is_list());

  Tally tally;
  for (const auto& file : files) {
    const std::string name = file.filename().string();
    int status = 0;
    const std::string out = run(python() + " " + shell_quote(oracle.string()) + " " + shell_quote(file.string()) + " " +
                                    shell_quote(convs_path.string()),
                                &status);
    auto want = parse_json(out);
    ASSERT_TRUE(status == 0 && want.ok() && want->is_list() && want->items().size() == convs->items().size())
        << "oracle failed on " << name;
    compare(name, read_file(file), *convs, *want, tally);
  }
  report("corpus", files.size(), convs->items().size(), tally);
  EXPECT_GE(tally.identical, 50);
}

// The cases of tests/template/cases/*.json (written by make_cases.py): every
// filter, test, method and operator on values of each type, whitespace
// control, scoping. Needs no fetched assets.
TEST(Cases, MatchJinja2) {
  if (!have_jinja2()) GTEST_SKIP() << "python3 with jinja2 not available (apt-get install python3-jinja2); skipping";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kHere / "cases"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());
  for (const auto& file : files) {
    auto cases = parse_json(read_file(file));
    ASSERT_TRUE(cases.ok()) << file << ": " << cases.message();
    const Value& convs = *cases->get("contexts");
    const Value& templates = *cases->get("templates");
    int status = 0;
    const std::string out =
        run(python() + " " + shell_quote((kHere / "jinja_oracle.py").string()) + " --cases " + shell_quote(file.string()),
            &status);
    auto want = parse_json(out);
    ASSERT_TRUE(status == 0 && want.ok() && want->is_list() && want->items().size() == templates.items().size())
        << "oracle failed on " << file;
    Tally tally;
    for (size_t i = 0; i < templates.items().size(); ++i)
      compare(file.stem().string() + "#" + std::to_string(i), templates.items()[i].str(), convs, want->items()[i],
              tally);
    report(file.filename().string(), templates.items().size(), convs.items().size(), tally);
    EXPECT_TRUE(tally.wrong.empty());
  }
}

}  // namespace
}  // namespace edgelm::jinja
