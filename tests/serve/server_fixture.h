// A live server on loopback over a tiny synthetic model, for end-to-end tests.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/engine.h"
#include "model/synth.h"
#include "serve/prompt.h"
#include "serve/server.h"
#include "testutil.h"

namespace edgelm::test {

// The tiny synthetic model the serve tests run (written once per test run).
inline std::string tiny_model_path() {
  const std::string path = temp_path("serve-tiny-llama-Q8_0.gguf");
  if (!std::filesystem::exists(path)) {
    SynthOptions so;
    so.shape = "tiny-llama";
    so.ftype = "Q8_0";
    so.output = path;
    EXPECT_TRUE(write_synthetic_model(so).ok());
  }
  return path;
}

// A TCP connection to 127.0.0.1:port, or -1.
inline int connect_loopback(int port) {
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

struct LiveServer {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<serve::Server> server;
  std::thread thread;
  int port = 0;

  struct Options {
    int slots = 4;
    int ctx = 256;
    double step_ms = 5;   // every engine step takes at least this long ...
    double token_ms = 0;  // ... plus this per token in the step
    std::string system_prompt;  // pinned at start (as --system-prompt-file), rendered as chatml
    std::string model;          // a GGUF file; "" = tiny_model_path()
    serve::ServerOptions server = [] {
      serve::ServerOptions s;
      s.admission.max_slowdown = 0;       // the relative gate only where a test asks for it
      s.admission.max_ttft_slowdown = 0;  // and the first-token promise
      return s;
    }();
  };

  explicit LiveServer(Options o) {
    auto m = Model::load(o.model.empty() ? tiny_model_path() : o.model);
    EXPECT_TRUE(m.ok());
    auto tok = tokenizer::Tokenizer::from_gguf((*m)->file);
    EXPECT_TRUE(tok.ok());
    PlanOptions po;
    po.slots = o.slots;
    po.ctx = o.ctx;
    po.step_tokens = 64;
    po.threads = 1;
    std::vector<int32_t> pinned;
    if (!o.system_prompt.empty()) {
      auto r = serve::ChatRenderer::builtin("chatml", *tok);
      EXPECT_TRUE(r.ok());
      auto t = serve::system_prompt_prefix(*tok, *r, o.system_prompt);
      EXPECT_TRUE(t.ok()) << t.message();
      pinned = *t;
      po.pinned_tokens = static_cast<int>(pinned.size());
    }
    auto plan = make_plan((*m)->config, (*m)->weights, po, Budget{1ull << 34, "test"});
    EngineOptions eo;
    eo.threads = 1;
    eo.min_step_seconds = o.step_ms / 1000.0;
    eo.min_token_seconds = o.token_ms / 1000.0;
    serve::resolve_classes(o.server);  // as edgelm serve does before the engine exists
    serve::keep_promise(o.server.admission, eo);
    auto e = Engine::create(std::move(m).value(), std::move(tok).value(), *plan, eo);
    EXPECT_TRUE(e.ok()) << e.message();
    engine = std::move(e).value();
    if (!pinned.empty()) {
      EXPECT_TRUE(engine->pin_prefix(pinned).ok());
    }
    engine->start();
    o.server.port = 0;
    if (o.server.chat_template.empty() && o.server.chat_template_file.empty()) o.server.chat_template = "chatml";
    server = std::make_unique<serve::Server>(*engine, o.server);
    EXPECT_TRUE(server->bind().ok());
    port = server->port();
    thread = std::thread([this] { server->run(); });
  }
  ~LiveServer() {
    server->stop();
    if (thread.joinable()) thread.join();
    engine->stop();
  }

  httplib::Client client(int timeout_s = 30) const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(timeout_s, 0);
    c.set_connection_timeout(5, 0);
    return c;
  }

  // Waits until no slot is held (requests released), up to `seconds`.
  bool wait_idle(double seconds = 5) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (engine->active_slots() > 0) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
};

// Connects, sends raw bytes, reads until hang_up() is true (checked every
// 20 ms or so) or `seconds` pass, then closes. Returns whether hang_up()
// was true, and what was read in `got`.
template <class Pred>
inline bool send_and_hang_up_when(int port, const std::string& bytes, Pred&& hang_up, double seconds,
                                  std::string* got = nullptr) {
  const int fd = connect_loopback(port);
  bool met = false;
  if (fd >= 0) {
    (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    timeval tv{0, 20000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    while (!(met = hang_up()) && std::chrono::steady_clock::now() < end) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n > 0 && got != nullptr) got->append(buf, static_cast<size_t>(n));
      if (n == 0) break;
    }
    ::close(fd);
  }
  return met;
}

// Connects, sends raw bytes, reads for `ms` milliseconds, then closes.
// Returns what was read.
inline std::string send_and_hang_up(int port, const std::string& bytes, int ms) {
  std::string got;
  send_and_hang_up_when(port, bytes, [] { return false; }, ms / 1000.0, &got);
  return got;
}

inline std::string post_request(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Sends a raw HTTP/1.1 POST of `body` to `path`, reads for `ms`, hangs up.
inline std::string post_and_hang_up(int port, const std::string& path, const std::string& body, int ms) {
  return send_and_hang_up(port, post_request(path, body), ms);
}

inline std::string chat_body(const std::string& content, int max_tokens, bool stream, const std::string& extra = "") {
  nlohmann::json j = {{"model", "test"},
                      {"messages", {{{"role", "user"}, {"content", content}}}},
                      {"max_tokens", max_tokens},
                      {"stream", stream},
                      {"ignore_eos", true}};
  std::string s = j.dump();
  if (!extra.empty()) s = s.substr(0, s.size() - 1) + "," + extra + "}";
  return s;
}

}  // namespace edgelm::test
