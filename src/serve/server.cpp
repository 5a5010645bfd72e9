#include "serve/server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "core/sysmem.h"
#include "serve/openai.h"
#include "serve/stop_matcher.h"
#include "tokenizer/utf8_stream.h"

namespace edgelm::serve {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

Result<Truncate> parse_truncate(std::string_view s) {
  if (s == "keep-end") return Truncate::KeepEnd;
  if (s == "keep-start") return Truncate::KeepStart;
  if (s == "none") return Truncate::None;
  return make_error("unknown --truncate policy '{}' (keep-end, keep-start or none)", s);
}

namespace {

int http_threads_for(const ServerOptions& o, int slots) {
  // Every streaming request holds a worker; the rest answer refusals, health
  // checks and metrics, and absorb slow clients until their read timeout.
  return o.http_threads > 0 ? o.http_threads : std::max(32, slots + o.admission.queue + 16);
}

// Set on the thread that answers connections over the cap, so the
// pre-routing handler refuses them at once.
thread_local bool t_over_capacity = false;

// httplib's task queue, bounded: `workers` threads serve connections; up to
// `cap` connections may be open; the rest go to one refusing thread that
// answers 503 as soon as it has read the request line and headers.
class WorkerPool : public httplib::TaskQueue {
 public:
  WorkerPool(int workers, int cap) : cap_(cap) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(jobs_, false); });
    threads_.emplace_back([this] { loop(refusals_, true); });
  }
  ~WorkerPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (open_ < cap_) {
        ++open_;
        jobs_.push_back(std::move(fn));
      } else {
        refusals_.push_back(std::move(fn));
      }
    }
    cv_.notify_all();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  int open() const {
    std::lock_guard<std::mutex> lk(mu_);
    return open_;
  }

 private:
  void loop(std::deque<std::function<void()>>& q, bool refusing) {
    t_over_capacity = refusing;
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !q.empty(); });
        if (q.empty()) return;  // stopping and drained
        fn = std::move(q.front());
        q.pop_front();
      }
      fn();  // serves the connection until it closes
      if (!refusing) {
        std::lock_guard<std::mutex> lk(mu_);
        --open_;
      }
    }
  }

  const int cap_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_, refusals_;
  std::vector<std::thread> threads_;
  int open_ = 0;
  bool stop_ = false;
};

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t base = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  return fmt::format("{}-{:x}{:06x}", prefix, base & 0xffffffffff, counter.fetch_add(1) & 0xffffff);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint64_t server_buffer_bytes(const ServerOptions& o, int slots) {
  // Every serving worker may hold one request body, its parsed copy and a
  // response buffer; the refusing thread one more of each.
  const uint64_t per_conn = 3 * static_cast<uint64_t>(o.max_body_bytes) + 64 * 1024;
  return static_cast<uint64_t>(http_threads_for(o, slots) + 1) * per_conn;
}

// ---------------------------------------------------------------------------

struct Server::Impl {
  Impl(Server& s) : self(s), engine(s.engine_), o(s.o_), adm(*s.admission_), metrics(*s.metrics_) {}

  Server& self;
  Engine& engine;
  const ServerOptions& o;
  Admission& adm;
  Metrics& metrics;
  httplib::Server http;
  WorkerPool* pool = nullptr;  // owned by httplib
  int listen_fd = -1;
  std::optional<tokenizer::ChatTemplate> chat_template;
  std::string chat_template_error;
  std::thread monitor;
  std::atomic<bool> stopping{false};
  std::mutex stop_mu;
  std::condition_variable stop_cv;

  void routes();
  void reply_error(httplib::Response& res, const ApiError& e, Clock::time_point t0, int retry_after = 0);
  void refuse(httplib::Response& res, const Decision& d, Clock::time_point t0, const std::string& req_id);
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void watch_memory();
};

namespace {

// The state of one admitted request, shared by the content provider (which
// streams it) and the releaser (which frees the slot whatever happens).
struct Session {
  Server::Impl* impl;
  Engine* engine;
  int slot = -1;
  std::string id;
  std::string model;
  int64_t created = 0;
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  int top_logprobs = -1;
  int n_prompt = 0;
  int dropped = 0;
  Clock::time_point t0, t_first, t_last;
  int seen = 0;
  int completion_tokens = 0;
  size_t sent_bytes = 0;  // text bytes streamed so far (completions' text_offset)
  bool stopped_by_string = false;
  bool disconnected = false;
  bool finished = false;
  std::string finish_reason;
  std::string text;  // non-streamed: the whole output
  std::vector<TokenLogprobOut> logprobs;
  tokenizer::Utf8Stream utf8;
  StopMatcher stop;
  explicit Session(std::vector<std::string> stops) : stop(std::move(stops)) {}

  bool released = false;
  Finish final_state = Finish::None;
  // Gives the slot back (cancelling it if it still runs); once.
  void release_slot() {
    if (released) return;
    final_state = engine->finish(slot);
    engine->release(slot);
    released = true;
  }
};

std::string finish_text(Finish f, bool stopped_by_string) {
  if (stopped_by_string) return "stop";
  switch (f) {
    case Finish::Stop: return "stop";
    case Finish::Length: return "length";
    default: return "stop";
  }
}

}  // namespace

void Server::Impl::reply_error(httplib::Response& res, const ApiError& e, Clock::time_point t0, int retry_after) {
  res.status = e.status;
  if (retry_after > 0) res.set_header("Retry-After", std::to_string(retry_after));
  res.set_content(error_json(e), "application/json");
  (void)t0;
}

void Server::Impl::refuse(httplib::Response& res, const Decision& d, Clock::time_point t0, const std::string& req_id) {
  const bool unavailable = d.reason == Reason::Draining || d.reason == Reason::MemoryPressure;
  ApiError e;
  e.status = unavailable ? 503 : 429;
  e.type = unavailable ? "server_unavailable" : "rate_limit_exceeded";
  e.code = std::string(reason_name(d.reason));
  switch (d.reason) {
    case Reason::Slots: e.message = fmt::format("all {} slots are busy; retry after {} s", engine.n_slots(), d.retry_after_s); break;
    case Reason::Throughput:
      e.message = fmt::format("admitting another stream would drop every stream below {:.1f} tokens/s (predicted {:.1f}); retry after {} s",
                              d.rate_floor, d.predicted_rate, d.retry_after_s);
      break;
    case Reason::MemoryPressure: e.message = "the system is under memory pressure; retry later"; break;
    case Reason::Draining: e.message = "the server is shutting down"; break;
    default: e.message = "request refused"; break;
  }
  reply_error(res, e, t0, d.retry_after_s);
  metrics.count_rejection(d.reason);
  metrics.rejection_seconds.observe(std::chrono::duration<double>(Clock::now() - t0).count());
  spdlog::info("admit reject req={} reason={} active={}/{} queued={} retry_after={}", req_id, reason_name(d.reason),
               engine.active_slots(), engine.n_slots(), adm.queued(), d.retry_after_s);
}

void Server::Impl::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  const auto t0 = Clock::now();
  const std::string id = random_id(chat ? "chatcmpl" : "cmpl");

  // Cheap checks first: no parsing, no tokenizing before them.
  Decision d = adm.precheck();
  if (!d.ok()) return refuse(res, d, t0, id);
  const int slot = adm.acquire(d);
  if (slot < 0) return refuse(res, d, t0, id);
  // From here the slot is ours: every exit path releases it.
  struct Lease {
    Engine& e;
    int slot;
    bool kept = false;
    ~Lease() {
      if (!kept) e.release(slot);
    }
  } lease{engine, slot};

  RequestLimits limits;
  limits.n_vocab = engine.tokenizer().n_vocab();
  limits.max_content_bytes = o.max_body_bytes;
  auto parsed = chat ? parse_chat_request(req.body, limits) : parse_completion_request(req.body, limits);
  if (std::holds_alternative<ApiError>(parsed)) return reply_error(res, std::get<ApiError>(parsed), t0);
  GenerationRequest& r = std::get<GenerationRequest>(parsed);

  const tokenizer::Tokenizer& tok = engine.tokenizer();
  const int ctx = engine.ctx();
  const int want_out = r.max_tokens > 0 ? r.max_tokens : o.default_max_tokens;
  // Keep room for the answer when a prompt has to be cut: the requested
  // output, but never more than a quarter of the slot.
  const int limit = ctx - std::clamp(want_out, 1, std::max(1, ctx / 4));
  std::vector<int32_t> prompt;
  int dropped = 0;
  if (chat) {
    if (!chat_template) {
      return reply_error(res, {400, "invalid_request_error", "chat_template", chat_template_error, "messages"}, t0);
    }
    std::vector<tokenizer::ChatMessage> msgs;
    for (auto& m : r.messages) msgs.push_back({std::move(m.role), std::move(m.content)});
    auto render = [&]() -> Result<std::vector<int32_t>> { return tokenizer::encode_chat(tok, *chat_template, msgs, true); };
    auto ids = render();
    if (!ids.ok()) return reply_error(res, {400, "invalid_request_error", "invalid_messages", ids.message(), "messages"}, t0);
    const int full = static_cast<int>(ids->size());
    if (full > limit && o.truncate == Truncate::KeepEnd) {
      // Drop whole turns, oldest first, keeping a leading system message and the last turn.
      const size_t first = (!msgs.empty() && msgs[0].role == "system") ? 1 : 0;
      while (static_cast<int>(ids->size()) > limit && msgs.size() > first + 1) {
        msgs.erase(msgs.begin() + static_cast<long>(first));
        ids = render();
        if (!ids.ok()) return reply_error(res, {400, "invalid_request_error", "invalid_messages", ids.message(), "messages"}, t0);
      }
    }
    prompt = std::move(ids).value();
    dropped = full - static_cast<int>(prompt.size());
  } else if (!r.prompt_tokens.empty()) {
    prompt = r.prompt_tokens;
  } else {
    prompt = tok.encode(r.prompt, true, true);
  }
  if (prompt.empty()) return reply_error(res, {400, "invalid_request_error", "empty_prompt", "the prompt has no tokens", chat ? "messages" : "prompt"}, t0);

  // Token-level truncation when turns could not be dropped (or for completions).
  if (static_cast<int>(prompt.size()) > limit) {
    const int n = static_cast<int>(prompt.size());
    if (o.truncate == Truncate::None) {
      metrics.count_rejection(Reason::PromptTooLong);
      return reply_error(res,
                         {400, "invalid_request_error", "prompt_too_long",
                          fmt::format("the prompt has {} tokens; a slot holds {} tokens and {} are kept for the "
                                      "answer, so at most {} prompt tokens fit",
                                      n + dropped, ctx, ctx - limit, limit),
                          chat ? "messages" : "prompt"},
                         t0);
    }
    const bool bos = tok.bos() >= 0 && prompt[0] == tok.bos();
    if (o.truncate == Truncate::KeepStart) {
      prompt.resize(static_cast<size_t>(limit));
    } else {
      std::vector<int32_t> kept;
      kept.reserve(static_cast<size_t>(limit));
      if (bos) kept.push_back(prompt[0]);
      kept.insert(kept.end(), prompt.end() - (limit - (bos ? 1 : 0)), prompt.end());
      prompt = std::move(kept);
    }
    dropped += n - static_cast<int>(prompt.size());
  }

  GenerateParams gp;
  gp.sampling = r.sampling;
  if (!r.seed_given) gp.sampling.seed = static_cast<uint64_t>(t0.time_since_epoch().count()) ^ static_cast<uint64_t>(slot);
  gp.max_tokens = std::min(want_out, ctx - static_cast<int>(prompt.size()));
  gp.top_logprobs = r.top_logprobs;
  gp.ignore_eos = r.ignore_eos;
  if (Status st = engine.submit(slot, prompt, gp); !st.ok())
    return reply_error(res, {400, "invalid_request_error", "invalid_request", st.message(), ""}, t0);

  metrics.prompt_tokens.fetch_add(prompt.size());
  metrics.prompt_tokens_dropped.fetch_add(static_cast<uint64_t>(dropped));
  spdlog::info("admit accept req={} slot={} active={}/{} prompt={} dropped={} max_tokens={} stream={}", id, slot,
               engine.active_slots(), engine.n_slots(), prompt.size(), dropped, gp.max_tokens, r.stream);

  std::vector<std::string> stops = r.stop;
  auto s = std::make_shared<Session>(std::move(stops));
  s->impl = this;
  s->engine = &engine;
  s->slot = slot;
  s->id = id;
  s->model = r.model.empty() ? o.model_id : r.model;
  s->created = unix_now();
  s->chat = chat;
  s->stream = r.stream;
  s->include_usage = r.include_usage;
  s->top_logprobs = r.top_logprobs;
  s->n_prompt = static_cast<int>(prompt.size());
  s->dropped = dropped;
  s->t0 = t0;
  lease.kept = true;  // the releaser below owns the slot now

  if (dropped > 0) res.set_header("X-Edgelm-Prompt-Tokens-Dropped", std::to_string(dropped));
  res.set_header("Cache-Control", "no-cache");
  auto provider = [s](size_t, httplib::DataSink& sink) -> bool {
    Engine& e = *s->engine;
    const tokenizer::Tokenizer& t = e.tokenizer();
    Metrics& m = s->impl->metrics;
    const auto heartbeat = std::chrono::milliseconds(s->impl->o.heartbeat_ms);
    auto last_write = Clock::now();
    auto write = [&](const std::string& data) {
      if (s->disconnected) return false;
      last_write = Clock::now();
      if (!sink.write(data.data(), data.size())) s->disconnected = true;
      return !s->disconnected;
    };
    auto usage = [&]() {
      Usage u;
      u.prompt_tokens = s->n_prompt;
      u.completion_tokens = s->completion_tokens;
      u.prompt_tokens_dropped = s->dropped;
      return u;
    };
    std::string piece_out, emit;
    bool first_chunk = true;
    while (!s->finished) {
      const int before = s->seen;
      const int n = e.wait_for(s->slot, s->seen, Clock::now() + heartbeat);
      const bool idle = n == before;  // the wait timed out with nothing new
      emit.clear();
      std::vector<TokenLogprobOut> chunk_lps;
      for (; s->seen < n && !s->stopped_by_string; ++s->seen) {
        const auto now = Clock::now();
        if (s->seen == 0) {
          s->t_first = now;
          m.ttft.observe(std::chrono::duration<double>(now - s->t0).count());
        }
        s->t_last = now;
        const int32_t tok_id = e.output_token(s->slot, s->seen);
        ++s->completion_tokens;
        const std::string_view piece = t.token_piece_view(tok_id);
        if (s->top_logprobs >= 0) {
          TokenLogprob top[kMaxTopLogprobs];
          const int k = std::min(s->top_logprobs, kMaxTopLogprobs);
          TokenLogprobOut lp;
          lp.token = std::string(piece);
          lp.logprob = e.output_logprob(s->slot, s->seen, std::span<TokenLogprob>(top, static_cast<size_t>(k)));
          for (int i = 0; i < k; ++i) lp.top.emplace_back(t.token_piece(top[i].token), top[i].logprob);
          chunk_lps.push_back(std::move(lp));
        }
        piece_out.clear();
        s->utf8.push(piece, piece_out);
        if (s->stop.push(piece_out, emit)) {
          s->stopped_by_string = true;
          e.cancel(s->slot);
        }
      }
      const Finish fin = e.finish(s->slot);
      const bool engine_done = fin != Finish::None && e.wait_for(s->slot, s->seen, Clock::now()) == s->seen;
      if (s->stopped_by_string || engine_done) {
        if (!s->stopped_by_string) {
          piece_out.clear();
          s->utf8.flush(piece_out);
          s->stop.push(piece_out, emit);
          s->stop.flush(emit);
        }
        s->finished = true;
        s->finish_reason = finish_text(fin, s->stopped_by_string);
        if (fin == Finish::Error) s->finish_reason = "error";
        // Every token is read: the slot is free before the last bytes go out.
        s->release_slot();
      }
      if (s->stream) {
        if (!emit.empty() || !chunk_lps.empty()) {
          const auto* lps = chunk_lps.empty() ? nullptr : &chunk_lps;
          const std::string j = s->chat ? chat_chunk_json(s->id, s->created, s->model, emit, first_chunk, "", lps)
                                        : completion_chunk_json(s->id, s->created, s->model, emit, "", lps, s->sent_bytes);
          s->sent_bytes += emit.size();
          first_chunk = false;
          if (!write(sse_event(j))) break;
        } else if (!s->finished && idle) {
          // Nothing new: an SSE comment keeps proxies patient and reveals a
          // client that has gone away.
          if (!write(": keep-alive\n\n")) break;
        }
        if (s->finished) {
          const std::string j = s->chat ? chat_chunk_json(s->id, s->created, s->model, "", first_chunk, s->finish_reason, nullptr)
                                        : completion_chunk_json(s->id, s->created, s->model, "", s->finish_reason, nullptr);
          if (!write(sse_event(j))) break;
          if (s->include_usage && !write(sse_event(usage_chunk_json(s->id, s->created, s->model, usage(), s->chat)))) break;
          if (!write(sse_done())) break;
        }
      } else {
        s->text += emit;
        for (auto& lp : chunk_lps) s->logprobs.push_back(std::move(lp));
        if (s->finished) {
          const auto* lps = s->top_logprobs >= 0 ? &s->logprobs : nullptr;
          const std::string j =
              s->chat ? chat_completion_json(s->id, s->created, s->model, s->text, s->finish_reason, usage(), lps)
                      : completion_json(s->id, s->created, s->model, s->text, s->finish_reason, usage(), lps);
          if (!write(j)) break;
        } else if (idle || Clock::now() - last_write >= heartbeat) {
          // JSON allows leading whitespace: a space now and then keeps the
          // connection honest while the answer is generated, and a failed
          // write tells us the client has gone.
          if (!write(" ")) break;
        }
      }
    }
    if (s->disconnected) {
      e.cancel(s->slot);
      return false;
    }
    sink.done();
    return true;
  };
  auto releaser = [s](bool) {
    Engine& e = *s->engine;
    Metrics& m = s->impl->metrics;
    s->release_slot();
    const Finish fin = s->final_state;
    const auto now = Clock::now();
    if (!s->finished || s->disconnected) m.client_disconnects.fetch_add(1);
    m.generated_tokens.fetch_add(static_cast<uint64_t>(s->completion_tokens));
    m.request_seconds.observe(std::chrono::duration<double>(now - s->t0).count());
    if (s->completion_tokens > 1)
      m.tpot.observe(std::chrono::duration<double>(s->t_last - s->t_first).count() / (s->completion_tokens - 1));
    m.count_status(200);
    spdlog::info("release req={} slot={} active={}/{} finish={} prompt={} completion={} disconnected={} ms={}", s->id,
                 s->slot, e.active_slots(), e.n_slots(), s->finished ? s->finish_reason : std::string(finish_name(fin)),
                 s->n_prompt, s->completion_tokens, s->disconnected || !s->finished,
                 std::chrono::duration_cast<std::chrono::milliseconds>(now - s->t0).count());
  };
  res.set_chunked_content_provider(r.stream ? "text/event-stream" : "application/json", provider, releaser);
}

void Server::Impl::routes() {
  auto json_reply = [](httplib::Response& res, const json& j, int status = 200) {
    res.status = status;
    res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  };

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const auto t0 = Clock::now();
    if (t_over_capacity) {
      metrics.connections_refused.fetch_add(1);
      res.set_header("Connection", "close");
      res.set_header("Retry-After", "1");
      reply_error(res, {503, "server_unavailable", "too_many_connections", "too many open connections", ""}, t0, 1);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!o.api_key.empty() && req.path != "/health" && req.path != "/ready") {
      const std::string want = "Bearer " + o.api_key;
      if (req.get_header_value("Authorization") != want) {
        reply_error(res, {401, "invalid_request_error", "invalid_api_key", "missing or wrong API key (Authorization: Bearer ...)", ""}, t0);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    // Streamed generations count themselves when they end.
    if (!res.is_chunked_content_provider_) metrics.count_status(res.status);
  });
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, "invalid_request_error", "", "", ""};
    if (res.status == 404) e.code = "not_found", e.message = fmt::format("no route for {} {}", req.method, req.path);
    else if (res.status == 413) e.code = "body_too_large", e.message = fmt::format("request body exceeds {} bytes", o.max_body_bytes);
    else if (res.status == 405) e.code = "method_not_allowed", e.message = "method not allowed";
    else e.code = "http_error", e.message = fmt::format("HTTP error {}", res.status);
    res.set_content(error_json(e), "application/json");
  });
  http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    spdlog::error("handler exception: {}", what);
    res.status = 500;
    res.set_content(error_json({500, "server_error", "internal_error", what, ""}), "application/json");
  });

  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(models_json(o.model_id, unix_now(), "edgelm"), "application/json");
  });
  http.Get("/health", [json_reply](const httplib::Request&, httplib::Response& res) {
    json_reply(res, {{"status", "ok"}});
  });
  http.Get("/ready", [this, json_reply](const httplib::Request&, httplib::Response& res) {
    const Decision d = adm.precheck();
    if (!d.ok()) return json_reply(res, {{"status", "not_ready"}, {"reason", reason_name(d.reason)}}, 503);
    if (engine.active_slots() >= engine.n_slots())
      return json_reply(res, {{"status", "not_ready"}, {"reason", "slots"}}, 503);
    json_reply(res, {{"status", "ready"}, {"free_slots", engine.n_slots() - engine.active_slots()}});
  });
  http.Get("/slots", [this, json_reply](const httplib::Request&, httplib::Response& res) {
    static const char* names[] = {"free", "reserved", "queued", "prefill", "decode", "finished"};
    json arr = json::array();
    for (int i = 0; i < engine.n_slots(); ++i) {
      const auto st = engine.state(i);
      json j = {{"id", i}, {"state", names[static_cast<int>(st)]}, {"ctx", engine.ctx()}};
      if (st != Engine::SlotState::Free && st != Engine::SlotState::Reserved) {
        j["prompt_tokens"] = engine.prompt_tokens(i);
        j["generated_tokens"] = engine.wait_for(i, 1 << 30, Clock::now());
        j["max_tokens"] = engine.max_tokens(i);
      }
      arr.push_back(j);
    }
    json_reply(res, arr);
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(metrics, engine, adm, pool ? pool->open() : 0), "text/plain; version=0.0.4");
  });
  http.Post("/tokenize", [this, json_reply](const httplib::Request& req, httplib::Response& res) {
    json j = json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("content") || !j["content"].is_string())
      return reply_error(res, {400, "invalid_request_error", "invalid_request", "expected {\"content\": string}", "content"}, Clock::now());
    const bool add_special = j.value("add_special", false);
    const bool parse_special = j.value("parse_special", true);
    json_reply(res, {{"tokens", engine.tokenizer().encode(j["content"].get<std::string>(), add_special, parse_special)}});
  });
  http.Post("/detokenize", [this, json_reply](const httplib::Request& req, httplib::Response& res) {
    json j = json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
      return reply_error(res, {400, "invalid_request_error", "invalid_request", "expected {\"tokens\": [ids]}", "tokens"}, Clock::now());
    std::vector<int32_t> ids;
    for (const auto& v : j["tokens"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= engine.tokenizer().n_vocab())
        return reply_error(res, {400, "invalid_request_error", "invalid_token", "'tokens' must hold vocabulary ids", "tokens"}, Clock::now());
      ids.push_back(v.get<int32_t>());
    }
    json_reply(res, {{"content", engine.tokenizer().decode(ids)}});
  });
}

void Server::Impl::watch_memory() {
  while (!stopping.load()) {
    const SystemMemory m = read_system_memory();
    bool pressure = m.psi_some_avg10 && *m.psi_some_avg10 > o.memory_pressure_psi;
    if (m.cgroup_limit && m.cgroup_working_set &&
        static_cast<double>(*m.cgroup_working_set) > o.memory_pressure_fraction * static_cast<double>(*m.cgroup_limit))
      pressure = true;
    if (pressure != adm.memory_pressure()) {
      spdlog::warn("memory pressure {} (psi some avg10 {:.1f}%, working set {} of limit {})", pressure ? "on" : "off",
                   m.psi_some_avg10.value_or(0), m.cgroup_working_set.value_or(0), m.cgroup_limit.value_or(0));
      adm.set_memory_pressure(pressure);
    }
    std::unique_lock<std::mutex> lk(stop_mu);
    stop_cv.wait_for(lk, std::chrono::milliseconds(250), [&] { return stopping.load(); });
  }
}

// ---------------------------------------------------------------------------

Server::Server(Engine& engine, const ServerOptions& o)
    : engine_(engine),
      o_(o),
      admission_(std::make_unique<Admission>(engine, o.admission)),
      metrics_(std::make_unique<Metrics>()) {
  impl_ = std::make_unique<Impl>(*this);
  auto tmpl = tokenizer::ChatTemplate::for_tokenizer(engine.tokenizer(), o.chat_template);
  if (tmpl.ok()) impl_->chat_template = std::move(tmpl).value();
  else impl_->chat_template_error = tmpl.message();
  const int workers = http_threads_for(o, engine.n_slots());
  const int cap = o.max_connections > 0 ? o.max_connections : 4 * workers;
  impl_->http.new_task_queue = [this, workers, cap] {
    impl_->pool = new WorkerPool(workers, cap);
    return impl_->pool;
  };
  // httplib listens with a backlog of 5: a burst of connections would see
  // SYNs dropped and retried a second later. Remember the listening socket
  // and widen its backlog once bound.
  impl_->http.set_socket_options([this](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    // Tokens go out as soon as they are made: no Nagle delay (inherited by
    // the accepted sockets).
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    impl_->listen_fd = sock;
  });
  impl_->http.set_payload_max_length(o.max_body_bytes);
  impl_->http.set_read_timeout(o.read_timeout_s, 0);
  impl_->http.set_write_timeout(o.write_timeout_s, 0);
  impl_->http.set_keep_alive_timeout(o.keep_alive_s);
  impl_->http.set_keep_alive_max_count(1000);
  impl_->routes();
}

Server::~Server() { stop(); }

Status Server::bind() {
  const int p = o_.port == 0 ? impl_->http.bind_to_any_port(o_.host) : (impl_->http.bind_to_port(o_.host, o_.port) ? o_.port : -1);
  if (p <= 0) return make_error("cannot listen on {}:{} (in use, or not an address of this machine)", o_.host, o_.port);
  port_ = p;
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, 1024);
  return Status::Ok();
}

void Server::run() {
  impl_->monitor = std::thread([this] { impl_->watch_memory(); });
  impl_->http.listen_after_bind();
  impl_->stopping.store(true);
  impl_->stop_cv.notify_all();
  if (impl_->monitor.joinable()) impl_->monitor.join();
}

void Server::drain_and_stop() {
  admission_->set_draining();
  spdlog::info("draining: refusing new requests, {} running, up to {:.0f} s", engine_.active_slots(), o_.drain_timeout_s);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o_.drain_timeout_s * 1000));
  while (engine_.active_slots() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (engine_.active_slots() > 0) {
    spdlog::warn("drain timeout: cancelling {} running requests", engine_.active_slots());
    for (int i = 0; i < engine_.n_slots(); ++i) engine_.cancel(i);
    const auto hard = Clock::now() + std::chrono::seconds(5);
    while (engine_.active_slots() > 0 && Clock::now() < hard) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop();
}

void Server::stop() {
  if (impl_ && impl_->http.is_running()) impl_->http.stop();
}

}  // namespace edgelm::serve
