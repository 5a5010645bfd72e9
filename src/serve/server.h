// The HTTP front end: OpenAI-compatible routes, health and readiness,
// Prometheus metrics, and the admission gate, over cpp-httplib. It turns
// requests into engine slots and engine tokens into JSON and SSE; the engine
// knows nothing of it.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "serve/admission.h"
#include "serve/metrics.h"
#include "serve/prompt.h"
#include "tokenizer/chat_template.h"

namespace httplib {
class Server;
}

namespace edgelm::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string model_id = "edgelm";      // the name /v1/models reports
  std::string chat_template;            // a built-in format by name; "" = the model's own template
  std::string chat_template_file;       // a Jinja template file that replaces the model's
  std::string api_key;                  // "" = no authentication
  // Priority classes: a request's class from its API key (each such key is
  // also a valid API key), else from X-Priority when the operator trusts
  // it, else the default (AdmissionOptions::classes names them).
  std::vector<std::pair<std::string, std::string>> api_key_classes;  // key, class
  bool class_header = false;
  std::string default_class = "chat";
  AdmissionOptions admission;
  Truncate truncate = Truncate::KeepEnd;
  bool prompt_cache = true;             // reuse a free slot's cached prefix (--no-prompt-cache: off)
  int default_max_tokens = 1024;        // when a request gives none (still clamped to the slot)
  size_t max_body_bytes = 256 << 10;   // a 4096-token prompt is ~16 KiB of text
  int http_threads = 0;                 // 0: max(32, slots + queue + 16)
  int max_connections = 0;              // beyond this, connections get 503 at once; 0: 4 x http_threads
  int http_nice = 10;                   // the HTTP workers' nice above the engine's (0: the same)
  int read_timeout_s = 10;              // a client must send its request within this
  int write_timeout_s = 10;
  int keep_alive_s = 5;
  double drain_timeout_s = 30;
  double memory_pressure_psi = 10.0;    // some avg10 (%) above which new work is refused
  double memory_pressure_fraction = 0.95;  // cgroup working set / limit above which new work is refused
  int heartbeat_ms = 500;               // keep-alive writes while a response has nothing to send (stream.h)
  // The most a non-streamed answer may hold (text, logprobs, JSON); counted
  // once per slot in the plan. Larger answers must be streamed.
  uint64_t max_response_bytes = 2 << 20;
  // The status page's history: a ring of this many per-second samples,
  // allocated at start and counted with the server buffers.
  int status_seconds = 300;
};

// The bytes of memory the HTTP side can hold at most (request bodies and
// response buffers of every connection, the status page's ring of samples),
// for the memory plan.
// Whether a request can be of a class more urgent than the default: the
// X-Priority header is trusted, or an API key maps to such a class
// (AdmissionOptions::urgent_requests).
bool urgent_requests_possible(const ServerOptions& o);
// Sets what the gate's options derive from the server's: the default
// class's index (AdmissionOptions::default_class) and urgent_requests.
// Called before the engine's options are made (keep_promise) and by the
// server's constructor.
void resolve_classes(ServerOptions& o);

uint64_t server_buffer_bytes(const ServerOptions& o, int slots);
// A bound on the bytes a non-streamed answer of `max_tokens` tokens holds,
// with `top_logprobs` alternatives per token (-1: no logprobs), when no
// token's piece is longer than `max_piece` bytes.
uint64_t non_streamed_answer_bytes(int max_tokens, int top_logprobs, size_t max_piece);

class Server {
 public:
  Server(Engine& engine, const ServerOptions& o);
  ~Server();

  // Binds the port (0: any free port). Fails with a clear message.
  Status bind();
  int port() const { return port_; }
  // Serves until stop(); returns after the listener has closed.
  void run();
  // Refuse new work (503), let running requests finish up to the drain
  // timeout, then stop. Safe to call from any thread.
  void drain_and_stop();
  void stop();

  Admission& admission() { return *admission_; }
  const Metrics& metrics() const { return *metrics_; }

  struct Impl;  // the HTTP machinery (server.cpp)

 private:
  std::unique_ptr<Impl> impl_;
  Engine& engine_;
  ServerOptions o_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<Metrics> metrics_;
  int port_ = 0;
};

}  // namespace edgelm::serve
