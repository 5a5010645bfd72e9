#include "loadgen/load.h"

#include <httplib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "core/sched.h"
#include "loadgen/request_body.h"
#include "loadgen/response_parse.h"
#include "loadgen/sse_parser.h"

namespace edgelm::loadgen {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

Clock::duration clock_span(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Error bodies and non-streamed answers are kept up to this size; the rest is
// counted, not stored.
constexpr size_t kMaxBodyBytes = size_t{4} << 20;

// A header's leading number (Retry-After's seconds, a predicted TTFT's ms);
// NaN for anything else (Retry-After may be an HTTP-date, which the servers
// we test do not send).
double parse_header_number(const std::string& v) {
  double s = 0;
  const char* b = v.data();
  const char* e = v.data() + v.size();
  while (b < e && *b == ' ') ++b;
  auto [p, ec] = std::from_chars(b, e, s);
  if (ec != std::errc() || p == b)
    return kNoValue;
  return s;
}

const char* transport_name(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "connection";
    case httplib::Error::ConnectionTimeout:
      return "connect_timeout";
    case httplib::Error::Read:
      return "read";
    case httplib::Error::Write:
      return "write";
    case httplib::Error::Canceled:
      return "timeout";  // only our deadline cancels
    default:
      return "other";
  }
}

std::unique_ptr<httplib::Client> make_client(const Target& t, double timeout_s, bool keep_alive) {
  auto c = std::make_unique<httplib::Client>(t.host, t.port);
  const auto usec = [](double s) {
    return std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
  };
  c->set_connection_timeout(usec(std::min(timeout_s, 10.0)));
  c->set_read_timeout(usec(timeout_s));
  c->set_write_timeout(usec(std::min(timeout_s, 10.0)));
  c->set_keep_alive(keep_alive);
  // httplib writes the headers and the body of a request separately: with
  // Nagle's algorithm the body could wait for the server's delayed ACK
  // (up to 40 ms on Linux) and the wait would count as server latency.
  c->set_tcp_nodelay(true);
  return c;
}

// Everything one request needs, shared by every client of a run.
struct Shared {
  const LoadOptions& o;
  Target target;
  std::string path;
  BodyOptions body;
  Clock::time_point t0;
};

std::string body_for(const Shared& sh, uint64_t index) {
  // A different prompt for each request, the same for the same seed and index.
  const uint64_t seed = sh.o.seed * 0x9E3779B97F4A7C15ull + index;
  return make_body(sh.body, make_prompt(sh.o.prompt_tokens, seed));
}

// Sends one request and records what came back. `start` is when it was due.
// `keep_reply`: keep the answer's text in the record.
RequestRecord send_one(const Shared& sh, httplib::Client& cli, uint64_t index, Clock::time_point start,
                       const std::string& body, bool keep_reply = false) {
  RequestRecord r;
  r.index = index;
  r.start_s = seconds(start - sh.t0);
  const auto sent = Clock::now();
  r.lag_s = std::max(0.0, seconds(sent - start));
  const auto deadline = start + clock_span(sh.o.timeout_s);

  bool sse = false, done = false, timed_out = false;
  int usage_tokens = -1;
  Clock::time_point first{}, last{};
  std::string text;  // non-SSE body
  size_t text_bytes = 0;
  SseParser parser;

  httplib::Request req;
  req.method = "POST";
  req.path = sh.path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  if (sh.o.stream) req.set_header("Accept", "text/event-stream");
  req.response_handler = [&](const httplib::Response& res) {
    r.status = res.status;
    if (res.has_header("Retry-After"))
      r.retry_after_s = parse_header_number(res.get_header_value("Retry-After"));
    if (res.has_header("X-Edgelm-Predicted-Ttft-Ms"))
      r.predicted_ttft_s = parse_header_number(res.get_header_value("X-Edgelm-Predicted-Ttft-Ms")) / 1000;
    sse = res.get_header_value("Content-Type").rfind("text/event-stream", 0) == 0;
    return true;
  };
  auto on_event = [&](const SseEvent& ev, Clock::time_point now) {
    const ChunkInfo c = parse_chunk(ev.data);
    switch (c.kind) {
      case ChunkInfo::Kind::Done:
        done = true;
        break;
      case ChunkInfo::Kind::Error:
        if (r.error.empty()) r.error = c.error_code;
        break;
      case ChunkInfo::Kind::Invalid:
        if (r.error.empty()) r.error = "invalid_chunk";
        break;
      case ChunkInfo::Kind::Data:
        if (c.completion_tokens >= 0) usage_tokens = c.completion_tokens;
        if (keep_reply) r.reply += c.content;
        if (c.content_bytes > 0) {
          if (r.chunks == 0) {
            first = now;
          } else {
            const double gap = seconds(now - last);
            r.max_gap_s = std::isnan(r.max_gap_s) ? gap : std::max(r.max_gap_s, gap);
            r.gaps_s.push_back(static_cast<float>(gap));
          }
          last = now;
          ++r.chunks;
        }
        break;
    }
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const auto now = Clock::now();  // before parsing: the arrival time of these bytes
    if (now > deadline) {
      timed_out = true;
      return false;
    }
    if (sse) {
      parser.feed(std::string_view(data, n), [&](const SseEvent& ev) { on_event(ev, now); });
    } else {
      text_bytes += n;
      if (text.size() < kMaxBodyBytes) text.append(data, std::min(n, kMaxBodyBytes - text.size()));
    }
    return true;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = cli.send(req, res, err);
  const auto end = Clock::now();
  r.latency_s = seconds(end - start);
  r.keepalives = parser.comments();
  if (!ok) r.transport = timed_out ? "timeout" : transport_name(err);

  if (sse) {
    if (r.chunks > 0) r.ttft_s = seconds(first - start);
    r.tokens = usage_tokens >= 0 ? usage_tokens : r.chunks;
    if (r.chunks > 1 && r.tokens > 1) r.tpot_s = seconds(last - first) / (r.tokens - 1);
    if (ok && r.status == 200 && !done && r.error.empty()) r.transport = "incomplete";
    if (parser.broken() && r.error.empty()) r.error = "sse_line_too_long";
  } else if (ok || r.status != 0) {
    const BodyInfo b = parse_body(text);
    if (keep_reply) r.reply = b.content;
    if (r.status == 200) {
      if (!b.json && ok)
        r.error = "invalid_body";
      else if (!b.error_code.empty())
        r.error = b.error_code;
      r.tokens = b.completion_tokens >= 0 ? b.completion_tokens : (b.content_bytes > 0 ? 1 : 0);
    } else {
      r.error = b.error_code;
    }
  }
  return r;
}

class Recorder {
 public:
  void add(RequestRecord r) {
    std::lock_guard lock(mu_);
    records_.push_back(std::move(r));
  }
  std::vector<RequestRecord> take() {
    std::lock_guard lock(mu_);
    return std::move(records_);
  }

 private:
  std::mutex mu_;
  std::vector<RequestRecord> records_;
};

void closed_loop(const Shared& sh, int clients, Recorder& rec) {
  const auto stop_at = sh.t0 + clock_span(sh.o.duration_s);
  std::atomic<uint64_t> next_index{0};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(clients));
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      request_short_slice();  // as a remote client would, it does not wait on the server's cores
      auto cli = make_client(sh.target, sh.o.timeout_s, /*keep_alive=*/true);
      for (auto now = Clock::now(); now < stop_at; now = Clock::now()) {
        const uint64_t i = next_index.fetch_add(1);
        rec.add(send_one(sh, *cli, i, now, body_for(sh, i)));
      }
    });
  }
  for (auto& t : threads) t.join();
}

// Conversations: each client runs chats of o.turns turns back to back, each
// turn sending the history with the answers as they came back. A failed
// turn ends its chat (the next one starts fresh).
void conversations(const Shared& sh, int clients, Recorder& rec) {
  const auto stop_at = sh.t0 + clock_span(sh.o.duration_s);
  // One system message for every chat, as an edge deployment has.
  const std::string system = sh.o.system_tokens > 0 ? make_prompt(sh.o.system_tokens, sh.o.seed ^ 0x5157u) : "";
  std::atomic<uint64_t> next_index{0};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(clients));
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      request_short_slice();  // as a remote client would, it does not wait on the server's cores
      auto cli = make_client(sh.target, sh.o.timeout_s, /*keep_alive=*/true);
      std::vector<std::string> history;
      int turn = 0;
      for (auto now = Clock::now(); now < stop_at; now = Clock::now()) {
        if (turn == sh.o.turns) {
          history.clear();
          turn = 0;
        }
        const uint64_t i = next_index.fetch_add(1);
        const std::string user = make_prompt(sh.o.prompt_tokens, sh.o.seed * 0x9E3779B97F4A7C15ull + i);
        RequestRecord r = send_one(sh, *cli, i, now, make_conversation_body(sh.body, system, history, user), true);
        r.turn = turn + 1;
        // A 429 is retried as chat clients do (OpenAI's SDKs among them):
        // the same turn, after its Retry-After (1 s without one), with the
        // chat kept. Any other failure ends the chat.
        double wait_s = 0;
        if (r.ok()) {
          ++turn;
          history.push_back(user);
          history.push_back(std::move(r.reply));
        } else if (r.status == 429 && !r.transport_error()) {
          wait_s = std::isfinite(r.retry_after_s) && r.retry_after_s >= 0 ? r.retry_after_s : 1.0;
        } else {
          history.clear();
          turn = 0;
        }
        r.reply.clear();
        rec.add(std::move(r));
        if (wait_s > 0)
          std::this_thread::sleep_until(std::min(stop_at, Clock::now() + clock_span(wait_s)));
      }
    });
  }
  for (auto& t : threads) t.join();
}

// Open loop: this thread draws exponential gaps and hands each arrival to an
// idle worker; workers are started as needed, up to `cap`.
uint64_t open_loop(const Shared& sh, int cap, Recorder& rec) {
  request_short_slice();  // arrivals on time, not after a server thread's slice
  struct Job {
    uint64_t index;
    Clock::time_point due;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  size_t busy = 0;
  bool finished = false;
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(cap));
  auto worker = [&] {
    request_short_slice();  // as a remote client would, it does not wait on the server's cores
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return finished || !jobs.empty(); });
      if (jobs.empty()) return;
      const Job j = jobs.front();
      jobs.pop_front();
      ++busy;
      lock.unlock();
      auto cli = make_client(sh.target, sh.o.timeout_s, /*keep_alive=*/false);
      rec.add(send_one(sh, *cli, j.index, j.due, body_for(sh, j.index)));
      lock.lock();
      --busy;
    }
  };

  std::mt19937_64 rng(sh.o.seed);
  std::exponential_distribution<double> gap(sh.o.rate);
  uint64_t dropped = 0, index = 0;
  double t = 0;
  for (;;) {
    t += gap(rng);
    if (t >= sh.o.duration_s) break;
    const auto due = sh.t0 + clock_span(t);
    std::this_thread::sleep_until(due);
    std::lock_guard lock(mu);
    if (busy + jobs.size() >= static_cast<size_t>(cap)) {
      ++dropped;
      continue;
    }
    jobs.push_back({index++, due});
    // Every worker is busy or about to take a job; start one more if the
    // idle ones cannot take all the queued jobs.
    if (workers.size() - busy < jobs.size()) workers.emplace_back(worker);
    cv.notify_one();
  }
  {
    std::lock_guard lock(mu);
    finished = true;
  }
  cv.notify_all();
  for (auto& w : workers) w.join();
  return dropped;
}

}  // namespace

Result<Target> parse_url(std::string_view url) {
  Target t;
  std::string_view rest = url;
  if (rest.rfind("https://", 0) == 0)
    return make_error("{}: https is not supported; use http://", url);
  if (rest.rfind("http://", 0) == 0)
    rest.remove_prefix(7);
  else if (rest.find("://") != std::string_view::npos)
    return make_error("{}: only http:// URLs are supported", url);
  const size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (hostport.empty()) return make_error("{}: no host", url);
  if (hostport.front() == '[') {  // [v6]:port
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) return make_error("{}: unterminated IPv6 address", url);
    t.host = std::string(hostport.substr(1, close - 1));
    hostport.remove_prefix(close + 1);
    if (!hostport.empty() && hostport.front() != ':')
      return make_error("{}: junk after the IPv6 address", url);
  } else {
    const size_t colon = hostport.find(':');
    t.host = std::string(hostport.substr(0, colon));
    hostport = colon == std::string_view::npos ? std::string_view() : hostport.substr(colon);
  }
  if (t.host.empty()) return make_error("{}: no host", url);
  if (!hostport.empty()) {
    hostport.remove_prefix(1);
    int port = 0;
    auto [p, ec] = std::from_chars(hostport.data(), hostport.data() + hostport.size(), port);
    if (ec != std::errc() || p != hostport.data() + hostport.size() || port <= 0 || port > 65535)
      return make_error("{}: bad port '{}'", url, hostport);
    t.port = port;
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (path.size() >= 3 && path.substr(path.size() - 3) == "/v1") path.remove_suffix(3);
  t.base = std::string(path);
  return t;
}

Result<LoadResult> run_load(const LoadOptions& o) {
  EDGELM_ASSIGN(Target target, parse_url(o.url));
  if (o.duration_s <= 0) return make_error("--duration must be positive");
  if (o.rate < 0) return make_error("--rate must not be negative");
  if (o.prompt_tokens < 1 || o.max_tokens < 1)
    return make_error("--prompt-tokens and --max-tokens must be at least 1");
  if (o.timeout_s <= 0) return make_error("--timeout must be positive");
  if (o.turns < 0 || o.system_tokens < 0) return make_error("--turns and --system-tokens must not be negative");
  if (o.turns > 0 && (o.rate > 0 || !o.chat))
    return make_error("--turns runs conversations: closed loop (no --rate) with --chat");
  LoadResult result;
  result.options = o;
  result.open_loop = o.rate > 0;
  if (result.open_loop)
    result.concurrency = o.clients > 0 ? o.clients : std::max(1, o.max_in_flight);
  else
    result.concurrency = o.clients > 0 ? o.clients : 1;

  {  // Reachable at all? Any HTTP answer will do (some servers have no /health).
    auto c = make_client(target, 5, false);
    auto res = c->Get(target.base + "/health");
    if (!res)
      return make_error("cannot reach {}:{} ({})", target.host, target.port,
                        httplib::to_string(res.error()));
  }
  if (o.pid > 0) EDGELM_TRY(RssSampler::check_pid(o.pid));

  double cpu0 = 0;
  if (rusage ru{}; ::getrusage(RUSAGE_SELF, &ru) == 0)
    cpu0 = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  Shared sh{o, target, target.base + route(o.chat), BodyOptions{}, Clock::now()};
  sh.body.chat = o.chat;
  sh.body.stream = o.stream;
  sh.body.max_tokens = o.max_tokens;
  sh.body.model = o.model;
  result.unix_start =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::unique_ptr<RssSampler> sampler;
  if (o.pid > 0)
    sampler =
        std::make_unique<RssSampler>(o.pid, sh.t0, std::chrono::milliseconds(o.rss_interval_ms));

  Recorder rec;
  if (result.open_loop)
    result.client_dropped = open_loop(sh, result.concurrency, rec);
  else
    if (o.turns > 0)
      conversations(sh, result.concurrency, rec);
    else
      closed_loop(sh, result.concurrency, rec);
  result.wall_s = seconds(Clock::now() - sh.t0);
  result.records = rec.take();
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) {
    auto tv = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
    };
    result.client_cpu_s = tv(ru.ru_utime) + tv(ru.ru_stime) - cpu0;
  }
  if (sampler) {
    result.rss = sampler->stop();
    result.server_exited_at_s = sampler->exited_at_s();
  }
  return result;
}

}  // namespace edgelm::loadgen
