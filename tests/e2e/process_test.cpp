// The edgelm binary as a user runs it: exit codes and messages at start-up,
// SIGTERM under load, slow and flooding clients.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "model/synth.h"
#include "testutil.h"

namespace edgelm {
namespace {

using Clock = std::chrono::steady_clock;

std::string tiny_model() {
  const std::string path = test::temp_path("e2e-tiny-llama-Q8_0.gguf");
  if (!std::filesystem::exists(path)) {
    SynthOptions o;
    o.shape = "tiny-llama";
    o.ftype = "Q8_0";
    o.output = path;
    EXPECT_TRUE(write_synthetic_model(o).ok());
  }
  return path;
}

// A child process with its stdout+stderr captured into a file.
struct Proc {
  pid_t pid = -1;
  std::string log;

  Proc(std::vector<std::string> args, const std::string& name) {
    log = test::temp_path(name + ".log");
    pid = fork();
    if (pid == 0) {
      FILE* f = std::fopen(log.c_str(), "w");
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
      std::vector<char*> argv;
      std::string exe = EDGELM_EXE;
      argv.push_back(exe.data());
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(exe.c_str(), argv.data());
      _exit(127);
    }
  }
  ~Proc() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  std::string output() const {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Exit code, or -1 on timeout (-signal when killed by a signal).
  int wait(double seconds) {
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1000;
  }
  // The port from the "[INIT] listening on http://host:PORT" line.
  int port(double seconds = 20) const {
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    const std::regex re("listening on http://[^:]+:([0-9]+)");
    while (Clock::now() < end) {
      std::smatch m;
      const std::string out = output();
      if (std::regex_search(out, m, re)) return std::stoi(m[1]);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
};

std::string body(int max_tokens, bool stream) {
  return nlohmann::json({{"prompt", "once upon a time"}, {"max_tokens", max_tokens}, {"stream", stream}, {"ignore_eos", true}})
      .dump();
}

TEST(Process, RefusesToStartOverBudgetAndSaysWhatFits) {
  // 512 x 2048 tokens of KV is 1 GiB for the tiny model, and the HTTP side
  // plans about 1.4 GiB for 512 slots: over a 2 GiB budget, which still
  // holds some slots after the process's own baseline (larger under the
  // sanitizers).
  Proc p({"serve", "-m", tiny_model(), "--slots", "512", "--ctx", "2048", "--memory-budget", "2GiB", "--port", "0"},
         "overbudget");
  EXPECT_EQ(p.wait(30), 2);
  const std::string out = p.output();
  EXPECT_NE(out.find("DOES NOT FIT"), std::string::npos) << out;
  EXPECT_NE(out.find("would fit: --slots"), std::string::npos) << out;
  EXPECT_EQ(out.find("listening"), std::string::npos);
}

TEST(Process, CorruptAndTruncatedModelsFailClearly) {
  const std::string good = tiny_model();
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string truncated = test::temp_path("truncated.gguf");
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  const std::string garbage = test::temp_path("garbage.gguf");
  std::ofstream(garbage, std::ios::binary) << std::string(4096, '\x5a');
  std::string flipped = bytes;
  flipped[17] = '\x7f';  // the metadata count's high byte
  const std::string corrupt = test::temp_path("corrupt.gguf");
  std::ofstream(corrupt, std::ios::binary) << flipped;
  for (const auto& [file, needle] : std::vector<std::pair<std::string, std::string>>{
           {truncated, "runs past the end"}, {garbage, "not a GGUF file"}, {corrupt, "invalid GGUF"},
           {test::temp_path("missing.gguf"), "cannot open"}}) {
    for (const char* cmd : {"serve", "info", "run"}) {
      std::vector<std::string> args = {cmd, "-m", file};
      if (std::string(cmd) == "run") args.insert(args.end(), {"-p", "x"});
      Proc p(args, std::string("bad-") + cmd);
      EXPECT_EQ(p.wait(30), 1) << cmd << " " << file;
      const std::string out = p.output();
      EXPECT_NE(out.find("error: "), std::string::npos) << out;
      EXPECT_NE(out.find(needle), std::string::npos) << cmd << " " << file << ": " << out;
      EXPECT_EQ(out.find("Segmentation"), std::string::npos);
    }
  }
}

// SIGTERM while streams run: they finish, new requests get 503, exit 0.
TEST(Process, DrainsOnSigtermUnderLoad) {
  // Two streams at once, both admitted: the first-token promise and the
  // throughput gate are off (a loaded sanitizer build's step times could
  // make either refuse the second; Ttft.* and the gate's tests test them).
  // Each stream lasts about 3 s, so both are seen running even when the
  // HTTP workers (niced) get little of a loaded machine's CPU.
  Proc p({"serve", "-m", tiny_model(), "--slots", "2", "--ctx", "256", "--port", "0", "--threads", "1",
          "--debug-step-ms", "20", "--max-ttft-slowdown", "0", "--min-stream-rate", "0", "--max-slowdown", "0"},
         "drain");
  const int port = p.port();
  ASSERT_GT(port, 0) << p.output();
  auto stream = [&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    return c.Post("/v1/completions", body(150, true), "application/json");  // ~3 s
  };
  auto a = std::async(std::launch::async, stream);
  auto b = std::async(std::launch::async, stream);
  httplib::Client c("127.0.0.1", port);
  // Both admitted (by the server's own count), then SIGTERM; the drain has
  // begun when /ready gives it as the reason.
  const bool both = test::wait_until([&] {
    auto m = c.Get("/metrics");
    return m && m->body.find("\nedgelm_slots_busy 2\n") != std::string::npos;
  }, 10);
  if (!both) {
    // Say what the two requests got, and what the server printed.
    for (auto* f : {&a, &b}) {
      auto r = f->get();
      ADD_FAILURE() << "a stream: " << (r ? std::to_string(r->status) + " " + r->body.substr(0, 400) : "no reply");
    }
    kill(p.pid, SIGTERM);
    p.wait(20);
    FAIL() << "the two streams were not admitted; the server printed:\n" << p.output();
  }
  ASSERT_EQ(kill(p.pid, SIGTERM), 0);
  ASSERT_TRUE(test::wait_until([&] {
    auto r = c.Get("/ready");
    return r && r->status == 503 && r->body.find("draining") != std::string::npos;
  }, 10)) << "no drain after SIGTERM";
  auto refused = c.Post("/v1/completions", body(5, false), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(nlohmann::json::parse(refused->body)["error"]["code"], "draining");
  auto ready = c.Get("/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  for (auto* f : {&a, &b}) {
    auto r = f->get();
    ASSERT_TRUE(r) << "an admitted request lost its reply";
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos);
    EXPECT_NE(r->body.find("\"finish_reason\":\"length\""), std::string::npos);
  }
  EXPECT_EQ(p.wait(20), 0) << p.output();
}

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Clients that send a byte now and then hold a worker each until the read
// timeout; the server keeps answering everyone else meanwhile: a health
// check comes back well before the slow ones are cut off (a loaded
// ThreadSanitizer run took 0.58 s, so the bound is the timeout's, not a
// speed).
TEST(Process, SlowClientsDoNotStarveOthers) {
  Proc p({"serve", "-m", tiny_model(), "--slots", "2", "--ctx", "256", "--port", "0", "--threads", "1",
          "--read-timeout", "3"},
         "slowloris");
  const int port = p.port();
  ASSERT_GT(port, 0) << p.output();
  std::vector<int> slow;
  for (int i = 0; i < 12; ++i) {
    int fd = connect_to(port);
    ASSERT_GE(fd, 0);
    (void)!::send(fd, "POST /v1/completions HTTP/1.1\r\n", 31, MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10, 0);
  const auto t0 = Clock::now();
  auto r = c.Get("/health");
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(sec, 2.0) << "a health check waited behind slow clients";
  auto g = c.Post("/v1/completions", body(4, false), "application/json");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 200);
  // The slow ones are cut off after the read timeout.
  std::this_thread::sleep_for(std::chrono::milliseconds(4000));
  int closed = 0;
  for (int fd : slow) {
    char buf[256];
    timeval tv{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    closed += n >= 0;  // EOF or an error reply: the server let go
    ::close(fd);
  }
  EXPECT_EQ(closed, 12);
  kill(p.pid, SIGTERM);
  EXPECT_EQ(p.wait(20), 0);
}

// More connections than the cap: the extra ones get 503 at once; the
// server stays up and serves again when they leave.
TEST(Process, ConnectionFloodBeyondTheCap) {
  Proc p({"serve", "-m", tiny_model(), "--slots", "1", "--ctx", "256", "--port", "0", "--threads", "1",
          "--http-threads", "4", "--max-connections", "6", "--read-timeout", "3"},
         "flood");
  const int port = p.port();
  ASSERT_GT(port, 0) << p.output();
  // Six connections in the middle of a request fill the cap (idle ones
  // would be closed to make room: two of the six wait for a worker)...
  std::vector<int> idle;
  for (int i = 0; i < 6; ++i) {
    idle.push_back(connect_to(port));
    (void)!::send(idle.back(), "POST /v1/completions HTTP/1.1\r\n", 31, MSG_NOSIGNAL);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // ...so the next requests are refused at once.
  int refused = 0;
  for (int i = 0; i < 5; ++i) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(5, 0);
    const auto t0 = Clock::now();
    auto r = c.Get("/v1/models");
    if (r && r->status == 503) {
      ++refused;
      EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
    }
  }
  EXPECT_EQ(refused, 5);
  for (int fd : idle) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("edgelm_connections_refused_total 5"), std::string::npos);
  kill(p.pid, SIGTERM);
  EXPECT_EQ(p.wait(20), 0);
}

}  // namespace
}  // namespace edgelm

namespace edgelm {
namespace {

// `edgelm template` prints the rendered prompt exactly (nothing added) and
// exits 1 when the template raises or cannot be parsed.
TEST(Process, TemplateCommandPrintsThePromptExactly) {
  const std::string tmpl = test::temp_path("cmd-template.jinja");
  std::ofstream(tmpl) << "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}"
                         "{% endif %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]"
                         "{% endif %}";
  const std::string msgs = test::temp_path("cmd-template.json");
  std::ofstream(msgs) << R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"}],)"
                      << R"("add_generation_prompt":true})";
  Proc ok({"template", "-m", tiny_model(), "--chat-template-file", tmpl, "--messages", msgs}, "template-ok");
  EXPECT_EQ(ok.wait(30), 0) << ok.output();
  EXPECT_EQ(ok.output(), "[system]S[user]hi[assistant]");
  const std::string bad = test::temp_path("cmd-template-bad.jinja");
  std::ofstream(bad) << "line one\n{% frobnicate %}";
  Proc parse_error({"template", "-m", tiny_model(), "--chat-template-file", bad, "--messages", msgs}, "template-bad");
  EXPECT_EQ(parse_error.wait(30), 1);
  EXPECT_NE(parse_error.output().find("line 2"), std::string::npos) << parse_error.output();
}

// --system-prompt-file: the plan counts the pinned prefix's KV, and a file
// that cannot be used stops the command with a clear error.
TEST(Process, PlanCountsThePinnedSystemPrompt) {
  const std::string sys = test::temp_path("system-prompt.txt");
  std::ofstream(sys) << "You watch the cameras of the north gate and answer briefly.\n";
  auto plan_json = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan", "-m", tiny_model(), "--slots", "2", "--ctx", "256", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    Proc p(args, "plan-pinned");
    EXPECT_EQ(p.wait(30), 0) << p.output();
    return nlohmann::json::parse(p.output());
  };
  const nlohmann::json plain = plan_json({});
  const nlohmann::json pinned = plan_json({"--system-prompt-file", sys, "--chat-template", "chatml"});
  const int n = pinned["pinned_tokens"].get<int>();
  EXPECT_GT(n, 20);
  EXPECT_EQ(pinned["bytes"]["pinned"].get<uint64_t>(), static_cast<uint64_t>(n) * pinned["kv_bytes_per_token"].get<uint64_t>());
  EXPECT_EQ(pinned["bytes"]["total"].get<int64_t>() - plain["bytes"]["total"].get<int64_t>() -
                (pinned["bytes"]["process"].get<int64_t>() - plain["bytes"]["process"].get<int64_t>()),
            pinned["bytes"]["pinned"].get<int64_t>());
  // The model has no template of its own: without one there is nothing to render.
  Proc none({"plan", "-m", tiny_model(), "--system-prompt-file", sys}, "plan-pinned-none");
  EXPECT_EQ(none.wait(30), 1);
  EXPECT_NE(none.output().find("needs a chat template"), std::string::npos) << none.output();
  Proc missing({"serve", "-m", tiny_model(), "--port", "0", "--chat-template", "chatml", "--system-prompt-file",
                test::temp_path("no-such-prompt.txt")},
               "serve-pinned-missing");
  EXPECT_EQ(missing.wait(30), 1);
  EXPECT_NE(missing.output().find("cannot read it"), std::string::npos) << missing.output();
}

// The JSON object a command printed after any log lines (its nested
// objects are indented): from the first line that starts with '{'. Null
// when there is none.
nlohmann::json json_after_logs(const std::string& output) {
  const std::string out = "\n" + output;
  const size_t at = out.find("\n{");
  return at == std::string::npos ? nlohmann::json() : nlohmann::json::parse(out.substr(at + 1));
}

// bench --depth --with-depth-0: one decode from an empty context beside
// each decode at depth, and their ratios, in the JSON.
TEST(Process, BenchPairsDepthWithDepthZero) {
  Proc p({"bench", "-m", tiny_model(), "--threads", "1", "-p", "4", "-n", "6", "-r", "3",
          "--streams", "1", "-d", "32", "--with-depth-0", "--json", "--memory-budget", "1GiB"},
         "bench-depth-0");
  ASSERT_EQ(p.wait(120), 0) << p.output();
  const nlohmann::json j = json_after_logs(p.output());
  ASSERT_TRUE(j.is_object()) << p.output();
  ASSERT_EQ(j["depth"], 32);
  const auto at_depth = j["decode_samples"].get<std::vector<double>>();
  const auto empty = j["depth_0_decode_samples"].get<std::vector<double>>();
  const auto ratio = j["depth_ratio_samples"].get<std::vector<double>>();
  ASSERT_EQ(at_depth.size(), 3u);
  ASSERT_EQ(empty.size(), 3u);
  ASSERT_EQ(ratio.size(), 3u);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_GT(empty[r], 0);
    EXPECT_DOUBLE_EQ(ratio[r], at_depth[r] / empty[r]);
  }
  std::vector<double> sorted = ratio;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_DOUBLE_EQ(j["depth_ratio"].get<double>(), sorted[1]);
  // Without --depth there is nothing to pair.
  Proc plain({"bench", "-m", tiny_model(), "--threads", "1", "-p", "4", "-n", "4", "-r", "1",
              "--streams", "1", "--with-depth-0", "--json", "--memory-budget", "1GiB"},
             "bench-depth-0-plain");
  ASSERT_EQ(plain.wait(120), 0) << plain.output();
  EXPECT_EQ(plain.output().find("depth_ratio"), std::string::npos) << plain.output();
}

// bench --bandwidth: the probe over a fresh buffer (every read method, the
// best of them as the limit) and, where the weights were packed, the same
// probe over the packed weights themselves.
TEST(Process, BenchProbesBufferAndPackedWeights) {
  Proc p(
      {"bench", "-m", tiny_model(), "--threads", "2", "-p", "4", "-n", "2", "-r", "3", "--streams",
       "1", "--bandwidth", "--bandwidth-mib", "4", "--json", "--memory-budget", "1GiB"},
      "bench-bandwidth");
  ASSERT_EQ(p.wait(120), 0) << p.output();
  const std::string out = p.output();
  const nlohmann::json j = json_after_logs(out);
  ASSERT_TRUE(j.is_object()) << out;
  const auto methods = j["bandwidth_methods_gb_per_s"].get<std::map<std::string, double>>();
  ASSERT_GE(methods.size(), 2u);  // one share per thread and chunks in turn, at least 64-bit loads
  double best = 0;
  for (const auto& [name, gbs] : methods) {
    EXPECT_GT(gbs, 0) << name;
    best = std::max(best, gbs);
  }
  EXPECT_DOUBLE_EQ(j["bandwidth_gb_per_s"].get<double>(), best);
  EXPECT_DOUBLE_EQ(methods.at(j["bandwidth_method"].get<std::string>()), best);
  EXPECT_DOUBLE_EQ(j["decode_limit_tokens_per_s"].get<double>(),
                   best * 1e9 / j["weights_bytes"].get<double>());
  // The weights are probed exactly when they were packed (a scalar-only CPU keeps the file's
  // layout).
  const bool packed = out.find("interleaved layout") != std::string::npos;
  ASSERT_EQ(j.contains("weights_read_gb_per_s"), packed) << out;
  if (packed) {
    EXPECT_GT(j["weights_read_gb_per_s"].get<double>(), 0);
    EXPECT_GT(j["weights_read_bytes"].get<uint64_t>(), 0u);
    EXPECT_EQ(methods.count(j["weights_read_method"].get<std::string>()), 1u);
    // Each repetition: the weights read right before it, and its decode rate's share of the
    // limit that read gives; the median of the shares is reported.
    const auto reads = j["weights_read_samples"].get<std::vector<double>>();
    const auto decode = j["decode_samples"].get<std::vector<double>>();
    auto shares = j["decode_share_of_weights_read_samples"].get<std::vector<double>>();
    ASSERT_EQ(reads.size(), 3u) << out;
    ASSERT_EQ(decode.size(), 3u) << out;
    ASSERT_EQ(shares.size(), 3u) << out;
    const double bytes = j["weights_bytes"].get<double>();
    for (size_t r = 0; r < 3; ++r) {
      EXPECT_GT(reads[r], 0) << r;
      const double want = decode[r] * bytes / (reads[r] * 1e9);
      EXPECT_NEAR(shares[r], want, 1e-9 * want) << r;
    }
    std::sort(shares.begin(), shares.end());
    EXPECT_DOUBLE_EQ(j["decode_share_of_weights_read"].get<double>(), shares[1]);
  } else {
    EXPECT_FALSE(j.contains("weights_read_samples")) << out;
  }
  // Without --bandwidth, no probe.
  Proc plain({"bench", "-m", tiny_model(), "--threads", "1", "-p", "4", "-n", "2", "-r", "1",
              "--streams", "1", "--json", "--memory-budget", "1GiB"},
             "bench-no-bandwidth");
  ASSERT_EQ(plain.wait(120), 0) << plain.output();
  EXPECT_EQ(plain.output().find("bandwidth"), std::string::npos) << plain.output();
  EXPECT_EQ(plain.output().find("weights_read"), std::string::npos) << plain.output();
}

}  // namespace
}  // namespace edgelm
