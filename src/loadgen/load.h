// The load generator: sends OpenAI completion requests to a server for a
// while, closed-loop (N clients back to back) or open-loop (Poisson arrivals
// at R requests/s), and records what each request got and when.
//
// Every request is timed from its start: in open loop from its *scheduled*
// arrival, so a client that falls behind shows up as latency rather than as
// fewer requests (no coordinated omission). Token times are taken when the
// bytes of an SSE event arrive, before any JSON is parsed.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "loadgen/rss_sampler.h"

namespace edgelm::loadgen {

struct Target {
  std::string host;
  int port = 80;
  std::string base;  // path prefix before /v1/..., "" or "/something"
};

// "http://host[:port][/prefix]" (a trailing "/" or "/v1" is dropped). No TLS.
Result<Target> parse_url(std::string_view url);

struct LoadOptions {
  std::string url;
  // Closed loop (rate == 0): `clients` clients, each with one keep-alive
  // connection, each sending its next request as soon as the last one ended.
  // Open loop (rate > 0): Poisson arrivals at `rate` per second, each request
  // on a new connection on a worker thread; at most `clients` in flight
  // (0: max_in_flight). An arrival that finds them all busy is not sent and
  // counted as a client-side drop.
  int clients = 0;
  double rate = 0;
  int max_in_flight = 256;
  double duration_s = 10;  // no request starts after this; running ones finish
  int prompt_tokens = 128;
  int max_tokens = 64;
  bool stream = false;
  bool chat = false;
  std::string model;       // request "model" field ("" leaves it out)
  double timeout_s = 120;  // per request, from its start
  uint64_t seed = 1;
  // Conversations (closed loop, chat): each client holds a chat of `turns`
  // turns, each sending the whole history (its answers as they came back)
  // plus a new user message of prompt_tokens, then starts a new chat. Every
  // chat opens with the same system message of system_tokens (0: none).
  int turns = 0;
  int system_tokens = 0;
  int pid = 0;  // > 0: sample this process's RSS
  int rss_interval_ms = 100;
};

inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

struct RequestRecord {
  uint64_t index = 0;
  int turn = 0;           // conversations: 1.. within its chat (0 otherwise)
  double start_s = 0;     // since the run's start (open loop: the scheduled arrival)
  double lag_s = 0;       // open loop: how late the request actually went out
  int status = 0;         // HTTP status, 0 when no response line arrived
  std::string error;      // error.code of an error body or SSE error event
  std::string transport;  // "" or what went wrong on the wire: "connection", "read",
                          // "write", "timeout", "incomplete" (200 stream without [DONE])
  double retry_after_s = kNoValue;
  double ttft_s = kNoValue;     // first content chunk (streams only)
  double predicted_ttft_s = kNoValue;  // the server's own prediction (edgelm's X-Edgelm-Predicted-Ttft-Ms)
  double tpot_s = kNoValue;     // (last - first content chunk) / (tokens - 1)
  double max_gap_s = kNoValue;  // longest wait between content chunks
  double latency_s = 0;         // to the end of the response
  int tokens = 0;               // usage.completion_tokens when given, else content chunks
  int chunks = 0;               // SSE events with content
  size_t keepalives = 0;        // SSE comments seen
  std::vector<float> gaps_s;    // every wait between content chunks (chunks - 1 of them)
  std::string reply;            // conversations: the answer's text (sent back next turn)

  bool ok() const { return status == 200 && transport.empty() && error.empty(); }
  bool transport_error() const { return !transport.empty(); }
};

struct LoadResult {
  LoadOptions options;
  bool open_loop = false;
  int concurrency = 0;                 // clients (closed loop) or the in-flight cap (open loop)
  double unix_start = 0;               // wall-clock start, seconds since the epoch
  double wall_s = 0;                   // from the start to the end of the last request
  std::vector<RequestRecord> records;  // in completion order
  uint64_t client_dropped = 0;         // open loop: arrivals not sent because every worker was busy
  std::vector<RssSample> rss;          // empty without a pid
  double server_exited_at_s = -1;      // the sampled process disappeared at this time
  double client_cpu_s = 0;             // CPU time the load generator itself used (user + system)
};

// Runs the load. Fails before sending anything if the URL is malformed, the
// server cannot be reached (GET /health answers anything counts as reachable)
// or the pid cannot be sampled.
Result<LoadResult> run_load(const LoadOptions& o);

}  // namespace edgelm::loadgen
