#include "serve/server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "constrain/json_constraint.h"
#include "core/sched.h"
#include "core/sysmem.h"
#include "serve/chat_answer.h"
#include "serve/http_pool.h"
#include "serve/openai.h"
#include "serve/status.h"
#include "serve/status_ring.h"
#include "serve/stream.h"
#include "serve/text_budget.h"
#include "tokenizer/unicode.h"

namespace edgelm::serve {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

int http_threads_for(const ServerOptions& o, int slots) {
  // Every streaming request holds a worker; the rest answer refusals, health
  // checks and metrics, and absorb slow clients until their read timeout.
  return o.http_threads > 0 ? o.http_threads : std::max(32, slots + o.admission.queue + 16);
}

// Open connections beyond which new ones are refused (503).
int connection_cap(const ServerOptions& o, int workers) {
  return o.max_connections > 0 ? o.max_connections : 4 * workers;
}

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t base = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  return fmt::format("{}-{:x}{:06x}", prefix, base & 0xffffffffff, counter.fetch_add(1) & 0xffffff);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Request text in preparation at once (TextBudget): one body of the
// largest size, or many smaller ones.
uint64_t text_budget_bytes(const ServerOptions& o) {
  return std::max<uint64_t>(o.max_body_bytes, 64 << 10);
}

// What preparing a text may hold at its peak, per byte of the budget: the
// tokenizer's symbols (28 bytes a character) and heap, the ids and the
// copies. Measured over 200 kB of spaces, base64, CJK and words, with an
// SPM and a BPE vocabulary (one /tokenize call's peak resident growth):
// 9-50x the body; counted 64x.
constexpr uint64_t kTextPeakFactor = 64;

// How long a request waits for its turn in the budget before a 503.
constexpr std::chrono::milliseconds kTextWait{5000};

// Per slot, the sampler keeps its holder's generation, token count and rate.
constexpr uint64_t kSlotSampleBytes = sizeof(uint64_t) + sizeof(int) + sizeof(std::atomic<float>);

}  // namespace

uint64_t server_buffer_bytes(const ServerOptions& o, int slots) {
  // Every serving worker may hold one request body, its parsed copy and a
  // response buffer; each refusing thread as much (an upper bound: it reads
  // no body). Every open connection may hold what the lobby keeps of its
  // next request (HttpConn::kLobbyBytes) and one read more, and as many
  // connections over the cap may wait with a head of up to 8 KiB
  // (HttpConn::kOverCapBytes) and one read more.
  const uint64_t per_conn = 3 * static_cast<uint64_t>(o.max_body_bytes) + 64 * 1024;
  const int workers = http_threads_for(o, slots);
  const auto cap = static_cast<uint64_t>(connection_cap(o, workers));
  // And every slot one non-streamed answer (its text, logprobs and JSON),
  // which the gate keeps within max_response_bytes.
  // And the status page's ring, with each slot's last token count and rate.
  // And the texts in preparation (TextBudget).
  return static_cast<uint64_t>(workers + WorkerPool::kRefusers) * per_conn +
         cap * (64 + 4 + 8 + 4) * 1024 + kTextPeakFactor * text_budget_bytes(o) +
         static_cast<uint64_t>(slots) * o.max_response_bytes + StatusRing::bytes(o.status_seconds) +
         static_cast<uint64_t>(slots) * kSlotSampleBytes;
}

uint64_t non_streamed_answer_bytes(int max_tokens, int top_logprobs, size_t max_piece) {
  // Text: the bytes, and up to 6 in JSON for each (\u00XX). Logprobs: per
  // entry a struct and its JSON (escaped token, its byte list, the number).
  const uint64_t p = max_piece;
  const uint64_t text = 7 * p;
  const uint64_t entries = top_logprobs >= 0 ? static_cast<uint64_t>(1 + top_logprobs) : 0;
  return static_cast<uint64_t>(std::max(max_tokens, 0)) * (text + entries * (96 + 11 * p));
}

// ---------------------------------------------------------------------------

struct Server::Impl {
  Impl(Server& s) : self(s), engine(s.engine_), o(s.o_), adm(*s.admission_), metrics(*s.metrics_) {}

  Server& self;
  Engine& engine;
  const ServerOptions& o;
  Admission& adm;
  Metrics& metrics;
  HttpServer http;
  // Each route's methods, for a 405 with Allow where a path is asked with
  // another (set while routes() registers them, read-only after).
  std::map<std::string, std::string, std::less<>> allowed;
  WorkerPool* pool = nullptr;  // owned by httplib
  int listen_fd = -1;
  std::optional<ChatRenderer> chat_template;
  std::string chat_template_error;
  bool chat_template_fatal = false;  // a template was given or found and cannot be used
  size_t max_piece = 0;  // the longest token piece of the vocabulary, in bytes
  // Every token's bytes by first byte, for response_format's constraints
  // (made once; about 8 bytes a token).
  std::shared_ptr<const constrain::TokenVocab> vocab;
  std::thread monitor;
  TextBudget text_budget{text_budget_bytes(o)};
  std::atomic<bool> stopping{false};
  std::atomic<bool> stop_asked{false};  // Server::stop was called
  std::atomic<int> run_state{0};        // 0 before run, 1 in it (listening or about to), 2 after
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  // The status page's history and each slot's tokens/s, sampled once a
  // second by the monitor thread; all allocated here, at start.
  const Clock::time_point started = Clock::now();
  StatusRing ring{o.status_seconds};
  std::unique_ptr<std::atomic<float>[]> slot_rate;
  std::vector<uint64_t> slot_gen;    // the holding whose tokens slot_count counted
  std::vector<int> slot_count;       // its output tokens at the last sample
  Clock::time_point last_sample{};

  StatusView status_view() {
    return StatusView{engine, adm, metrics, o, ring,
                      std::span<const std::atomic<float>>(slot_rate.get(), static_cast<size_t>(engine.n_slots())),
                      std::chrono::duration<double>(Clock::now() - started).count()};
  }
  void sample_status(Clock::time_point now);

  void routes();
  void reply_error(httplib::Response& res, const ApiError& e, int retry_after = 0);
  // The 503 for a request whose text found no room in the text budget in time.
  void reply_busy_preparing(httplib::Response& res);
  bool refuse_framing(const httplib::Request& req, httplib::Response& res);
  void refuse(httplib::Response& res, const Decision& d, Clock::time_point t0, const std::string& req_id,
              std::string_view cls);
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  ApiError unreadable_request() const {
    return {400, "invalid_request_error", "unreadable_request",
            fmt::format("the request could not be read: malformed, headers too large, or not sent "
                        "whole within {} s",
                        o.read_timeout_s),
            ""};
  }
  ApiError body_too_large() const {
    return {413, "invalid_request_error", "body_too_large",
            fmt::format("request body exceeds {} bytes", o.max_body_bytes), ""};
  }
  // The request's priority class (an index into the gate's classes).
  int class_of(const httplib::Request& req) const;
  int class_index(std::string_view name) const;  // -1: no such class
  const std::string& class_name(int cls) const { return adm.options().classes[static_cast<size_t>(cls)].name; }
  void watch_memory();
};

void Server::Impl::reply_error(httplib::Response& res, const ApiError& e, int retry_after) {
  res.status = e.status;
  if (retry_after > 0) res.set_header("Retry-After", std::to_string(retry_after));
  res.set_content(error_json(e), "application/json");
}

void Server::Impl::reply_busy_preparing(httplib::Response& res) {
  reply_error(res,
              {503, "server_unavailable", "busy_preparing",
               fmt::format("the texts of other requests being prepared fill the server's budget of "
                           "{} bytes for {} s; "
                           "retry after 1 s",
                           text_budget.capacity(), kTextWait.count() / 1000),
               ""},
              1);
}

void Server::Impl::refuse(httplib::Response& res, const Decision& d, Clock::time_point t0, const std::string& req_id,
                          std::string_view cls) {
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
    case Reason::Ttft:
      e.message = fmt::format("the first token would come after {:.2f} s, more than the {:.2f} s promised; retry after {} s",
                              d.predicted_ttft, d.promised_ttft, d.retry_after_s);
      break;
    case Reason::MemoryPressure: e.message = "the system is under memory pressure; retry later"; break;
    case Reason::Draining: e.message = "the server is shutting down"; break;
    default: e.message = "request refused"; break;
  }
  reply_error(res, e, d.retry_after_s);
  metrics.count_rejection(d.reason);
  metrics.rejection_seconds.observe(std::chrono::duration<double>(Clock::now() - t0).count());
  spdlog::info("admit reject req={} class={} reason={} active={}/{} queued={} waited={} retry_after={} ttft_pred_ms={:.0f}",
               req_id, cls, reason_name(d.reason), engine.active_slots(), engine.n_slots(), adm.queued(), d.waited,
               d.retry_after_s, 1000 * d.predicted_ttft);
}

int Server::Impl::class_index(std::string_view name) const { return serve::class_index(adm.options().classes, name); }

int Server::Impl::class_of(const httplib::Request& req) const {
  const int dflt = adm.options().default_class;  // resolved once (resolve_classes)
  const std::string auth = req.get_header_value("Authorization");
  for (const auto& [key, cls] : o.api_key_classes)
    if (auth == "Bearer " + key) return std::max(class_index(cls), 0);
  if (o.class_header && req.has_header("X-Priority")) {
    const int c = class_index(req.get_header_value("X-Priority"));
    return c >= 0 ? c : dflt;  // an unknown class name is the default class
  }
  return dflt;
}

void Server::Impl::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  const auto t0 = Clock::now();
  const std::string id = random_id(chat ? "chatcmpl" : "cmpl");
  const int cls = class_of(req);
  if (!set_thread_urgent(cls < adm.options().default_class)) {
    static std::once_flag warned;
    std::call_once(warned, [] {
      spdlog::warn("cannot raise an HTTP worker's CPU priority for an urgent request (needs root, CAP_SYS_NICE "
                   "or LimitNICE): urgent requests are served at --http-nice");
    });
  }
  // Refuse at once what no prompt could make admissible (draining, memory
  // pressure, every slot taken and no wait possible), before parsing
  // anything: under overload most requests end here, and a refusal that
  // skips the parse, the template and the tokenizer is done within the
  // worker's first short time slice (at --http-nice, every slice after it
  // waits behind the engine's busy cores).
  if (const Decision d = adm.refuse_at_once(cls); !d.ok()) return refuse(res, d, t0, id, class_name(cls));

  // Parse, render, tokenize and truncate before a slot is taken: the gate
  // decides on the prompt's real length, and a slow render holds no slot.
  // The text's turn in the budget first (its memory while it is prepared).
  TextPermit text(text_budget, req.body.size(), cls, kTextWait);
  if (!text.ok()) return reply_busy_preparing(res);
  RequestLimits limits;
  limits.n_vocab = engine.tokenizer().n_vocab();
  limits.max_content_bytes = o.max_body_bytes;
  auto parsed = chat ? parse_chat_request(req.body, limits) : parse_completion_request(req.body, limits);
  if (auto* err = std::get_if<ApiError>(&parsed)) return reply_error(res, *err);
  GenerationRequest& r = std::get<GenerationRequest>(parsed);
  const int ctx = engine.ctx();
  if (r.max_tokens > ctx - 1)
    return reply_error(
        res, invalid_request(
                 fmt::format("max_tokens is {}, but a slot holds {} tokens, prompt included, "
                             "so at most {} can be generated",
                             // (larger values were clamped to INT_MAX)
                             r.max_tokens == INT_MAX ? fmt::format("{} or more", INT_MAX)
                                                     : std::to_string(r.max_tokens),
                             ctx, ctx - 1),
                 "max_tokens"));
  const int want_out = r.max_tokens > 0 ? r.max_tokens : o.default_max_tokens;
  auto built = build_prompt(engine.tokenizer(), chat_template ? &*chat_template : nullptr, chat_template_error, r, ctx,
                            prompt_limit(ctx, want_out), o.truncate);
  if (auto* err = std::get_if<ApiError>(&built)) {
    if (err->code == "prompt_too_long") metrics.count_rejection(Reason::PromptTooLong);
    return reply_error(res, *err);
  }
  BuiltPrompt& prompt = std::get<BuiltPrompt>(built);
  text.release();  // what remains is the prompt's ids, within a slot's context
  const int n_prompt = static_cast<int>(prompt.tokens.size());

  GenerateParams gp;
  gp.sampling = r.sampling;
  gp.max_tokens = std::min(want_out, ctx - n_prompt);  // what only this prompt makes too large is clamped
  gp.top_logprobs = r.top_logprobs;
  gp.ignore_eos = r.ignore_eos;
  if (Status st = gp.sampling.validate(); !st.ok()) return reply_error(res, invalid_request(st.message()));
  if (r.schema) {
    // The automaton's state is made here, once; decoding only steps it.
    if (!vocab->has_all_bytes())
      return reply_error(res, invalid_request("this model's vocabulary lacks single-byte tokens, which "
                                              "'response_format' needs to guarantee the answer ends",
                                              "response_format", "unsupported_value"));
    auto c = std::make_shared<constrain::JsonConstraint>(r.schema, vocab);
    if (c->min_tokens() > gp.max_tokens)
      return reply_error(res, invalid_request(fmt::format("the shortest answer the response_format allows takes up "
                                                          "to {} tokens, but only {} may be generated",
                                                          c->min_tokens(), gp.max_tokens),
                                              "max_tokens"));
    gp.constraint = std::move(c);
  }
  // Tools and thinking: how the answer is read, and a forced call's constraint.
  std::optional<OutputOptions> output;
  if (chat && chat_template) {
    auto plan = plan_chat_answer(r, *chat_template, prompt.tail, vocab, "call_" + id.substr(id.find('-') + 1));
    if (auto* err = std::get_if<ApiError>(&plan)) return reply_error(res, *err);
    ChatAnswerPlan& p = std::get<ChatAnswerPlan>(plan);
    if (p.constraint && p.min_tokens > gp.max_tokens)
      return reply_error(res, invalid_request(fmt::format("the shortest call 'tool_choice' allows takes up to {} tokens, "
                                                          "but only {} may be generated",
                                                          p.min_tokens, gp.max_tokens),
                                              "max_tokens"));
    if (p.constraint) gp.constraint = std::move(p.constraint);
    output = std::move(p.output);
  }
  // A non-streamed answer is held whole until it is sent: keep it within
  // what the plan counts for it.
  if (!r.stream) {
    const uint64_t need = non_streamed_answer_bytes(gp.max_tokens, r.top_logprobs, max_piece);
    if (need > o.max_response_bytes)
      return reply_error(res, invalid_request(fmt::format("a non-streamed answer of {} tokens{} may take {} bytes, more than "
                                                          "the {} the server plans for one; stream it (\"stream\": true) "
                                                          "or ask for fewer tokens or top_logprobs",
                                                          gp.max_tokens,
                                                          r.top_logprobs >= 0 ? fmt::format(" with {} top_logprobs", r.top_logprobs) : "",
                                                          need, o.max_response_bytes),
                                              r.top_logprobs >= 0 ? "top_logprobs" : "max_tokens"));
  }

  ClientWatch watch(req);
  SlotRef ref;
  Ask ask;
  ask.cls = cls;
  gp.priority = cls;
  ask.prompt = prompt.tokens;
  ask.max_tokens = gp.max_tokens;
  ask.reuse = o.prompt_cache && r.cache_prompt;
  const Decision d = adm.admit(ask, ref, [&] { return watch.gone(); });
  if (!d.ok()) return refuse(res, d, t0, id, class_name(cls));
  const auto t_admitted = std::chrono::steady_clock::now();
  // Admitted: from here the worker hands the prompt to the engine and
  // writes each token the engine makes, a little work that the client's
  // latency waits on. At --http-nice it would queue behind the engine's
  // busy cores; a flood's parsing and refusals stay below them.
  set_thread_urgent(true);
  // The slot is ours: every way out of this function gives it back, until
  // the stream takes it over.
  struct Held {
    Admission& adm;
    SlotRef ref;
    bool passed = false;
    ~Held() {
      if (!passed) adm.release(ref);
    }
  } held{adm, ref};
  gp.reuse = d.reuse;
  gp.copy_from = d.copy_from;
  gp.promote_after_s = d.promote_after_s;
  gp.keep_cache = o.prompt_cache && r.cache_prompt;
  if (!r.seed_given) gp.sampling.seed = static_cast<uint64_t>(t0.time_since_epoch().count()) ^ ref.gen;
  if (Status st = engine.submit(ref, prompt.tokens, gp); !st.ok())
    return reply_error(res, {400, "invalid_request_error", "invalid_request", st.message(), ""});
  metrics.prompt_tokens.fetch_add(static_cast<uint64_t>(n_prompt));
  metrics.predicted_ttft.observe(d.predicted_ttft);
  res.set_header("X-Edgelm-Predicted-Ttft-Ms", fmt::format("{:.0f}", 1000 * d.predicted_ttft));
  metrics.prompt_tokens_dropped.fetch_add(static_cast<uint64_t>(prompt.dropped));
  spdlog::info(
      "admit accept req={} class={} slot={} active={}/{} prompt={} cached={} copy={} dropped={} max_tokens={} stream={} "
      "waited={} preempted={} ttft_pred_ms={:.0f} ttft_unloaded_ms={:.0f} margin={:.2f}",
      id, class_name(cls), ref.slot, engine.active_slots(), engine.n_slots(), n_prompt, d.reuse,
      d.copy_from == -1 ? std::string("none") : fmt::format("{}:{}", d.copy_from == kPinnedPrefix ? std::string("pinned") : fmt::format("slot{}", d.copy_from), d.copied),
      prompt.dropped, gp.max_tokens, r.stream,
      d.waited, d.preempted, 1000 * d.predicted_ttft, 1000 * d.unloaded_ttft, d.margin);

  StreamSpec sp;
  sp.id = id;
  sp.model = r.model.empty() ? o.model_id : r.model;
  sp.created = unix_now();
  sp.chat = chat;
  sp.stream = r.stream;
  sp.close_delimited = req.version == "HTTP/1.0";
  sp.include_usage = r.include_usage;
  sp.top_logprobs = r.top_logprobs;
  sp.n_prompt = n_prompt;
  sp.dropped = prompt.dropped;
  sp.stops = std::move(r.stop);
  sp.t0 = t0;
  sp.t_admitted = t_admitted;
  sp.predicted_ttft = d.predicted_ttft;
  sp.output = std::move(output);
  held.passed = true;
  stream_response(res, StreamDeps{engine, adm, metrics, o.heartbeat_ms}, std::move(sp), ref);
}

// The refusal of a connection over the cap (pre-routing, or before any
// request: HttpServer's silent refusal).
namespace {
ApiError too_many_connections() {
  return {503, "server_unavailable", "too_many_connections", "too many open connections", ""};
}
ApiError invalid_content_length() {
  return {400, "invalid_request_error", "invalid_content_length",
          "Content-Length must be one decimal number of bytes", ""};
}
ApiError head_too_large() {
  return {431, "invalid_request_error", "headers_too_large",
          "the request line and headers exceed 64 KiB", ""};
}
ApiError unknown_method() {
  return {501, "invalid_request_error", "method_not_implemented",
          fmt::format("the request's method is not one this server implements ({})",
                      fmt::join(kRoutedMethods, ", ")),
          ""};
}
// The next item of a comma-separated header value, without its blanks;
// `list` keeps what follows it.
std::string_view next_item(std::string_view& list) {
  const size_t comma = list.find(',');
  const std::string_view item = list.substr(0, comma);
  list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  return trim_blanks(item);
}
// The first coding in a Content-Encoding value other than identity (any
// case), or empty if there is none.
std::string_view first_coding_not_identity(std::string_view value) {
  while (!value.empty()) {
    const std::string_view coding = next_item(value);
    if (!coding.empty() && !iequals(coding, "identity")) return coding;
  }
  return {};
}
// Whether an Accept-Encoding value takes gzip: "gzip", "x-gzip" or "*"
// listed without q=0.
bool accepts_gzip(std::string_view value) {
  while (!value.empty()) {
    const std::string_view item = next_item(value);
    const size_t semi = item.find(';');
    const std::string_view name = trim_blanks(item.substr(0, semi));
    if (!iequals(name, "gzip") && !iequals(name, "x-gzip") && name != "*") continue;
    double q = 1;
    if (semi != std::string_view::npos) {
      const std::string_view params = item.substr(semi + 1);
      if (const size_t at = params.find("q="); at != std::string_view::npos)
        q = std::strtod(std::string(params.substr(at + 2)).c_str(), nullptr);
    }
    if (q > 0) return true;
  }
  return false;
}
// A whole reply for HttpServer to write itself (no httplib response).
std::string raw_reply(const ApiError& e, int retry_after) {
  const char* reason = e.status == 503   ? "Service Unavailable"
                       : e.status == 431 ? "Request Header Fields Too Large"
                       : e.status == 501 ? "Not Implemented"
                                         : "Bad Request";
  const std::string body = error_json(e);
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\n{}Connection: close\r\nContent-Length: "
      "{}\r\n\r\n{}",
      e.status, reason,
      retry_after > 0 ? fmt::format("Retry-After: {}\r\n", retry_after) : std::string(),
      body.size(), body);
}
}  // namespace

// Requests refused before their body is read, with the connection closed
// after the reply (whatever body there is stays unread on it): over the
// connection cap (503); a body framed other than by one decimal
// Content-Length (httplib 0.11 reads a chunked body whole, past --max-body,
// and a POST without a length until the client closes; every client of this
// API sends one): 411 or 400; a compressed body (httplib would inflate it
// whole, past --max-body): 415; a body on a GET or HEAD, which httplib would
// leave on the connection to be read as the next request: 400. True when
// `res` holds the refusal. Called as soon as the headers are read (Expect
// and pre-routing), it also tells HttpServer the body's length.
bool Server::Impl::refuse_framing(const httplib::Request& req, httplib::Response& res) {
  const size_t n = req.get_header_value_count("Content-Length");
  const std::string length = n > 0 ? req.get_header_value("Content-Length", 0) : std::string();
  bool decimal = !length.empty() && length.size() <= 19 &&
                 length.find_first_not_of("0123456789") == std::string::npos;
  for (size_t i = 1; i < n && decimal; ++i)
    decimal = req.get_header_value("Content-Length", i) == length;
  request_headers_read(decimal ? std::stoull(length) : 0);
  const auto refuse = [&](const ApiError& e, int retry_after = 0) {
    close_after_response();
    mark_close(req, res);
    reply_error(res, e, retry_after);
    return true;
  };
  if (over_capacity_thread()) {
    metrics.connections_refused.fetch_add(1);
    res.set_header("Retry-After", "1");
    return refuse(too_many_connections(), 1);
  }
  if (req.has_header("Transfer-Encoding"))
    return refuse(
        {411, "invalid_request_error", "length_required",
         "send the request body with a Content-Length (Transfer-Encoding is not accepted)", ""});
  if (n > 0 && !decimal) return refuse(invalid_content_length());
  // Refused before its body is read (httplib would first read past it).
  if (n > 0 && std::stoull(length) > o.max_body_bytes) return refuse(body_too_large());
  const bool has_body = n > 0 && length.find_first_not_of('0') != std::string::npos;
  // A compressed body: httplib inflates gzip and deflate whole into memory,
  // and --max-body bounds only the bytes sent (51 KB of gzip took the
  // resident size from 16 to 169 MB before its 50 MB prompt was refused),
  // so a few such requests at once could exhaust a board's memory. RFC 9110
  // 12.5.3: 415, and Accept-Encoding says what is taken.
  for (size_t i = 0; has_body && i < req.get_header_value_count("Content-Encoding"); ++i) {
    const std::string value = req.get_header_value("Content-Encoding", i);
    const std::string_view coding = first_coding_not_identity(value);
    if (coding.empty()) continue;
    res.set_header("Accept-Encoding", "identity");
    return refuse({415, "invalid_request_error", "unsupported_content_encoding",
                   fmt::format("Content-Encoding '{}' is not accepted: send the body uncompressed",
                               coding.substr(0, 40)),
                   ""});
  }
  const bool reads_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
                          req.method == "DELETE";
  if (reads_body && n == 0)
    return refuse({411, "invalid_request_error", "length_required",
                   fmt::format("a {} needs a Content-Length (0 for no body)", req.method), ""});
  if (!reads_body && has_body)
    return refuse({400, "invalid_request_error", "unexpected_body",
                   fmt::format("a {} request carries no body", req.method), ""});
  return false;
}

void Server::Impl::routes() {
  auto json_reply = [](httplib::Response& res, const json& j, int status = 200) {
    res.status = status;
    res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  };

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // httplib's Request is not const where it lives (the handler is only
    // given a const view), and it reads the body and writes the reply after
    // this handler: what is changed here is what it goes by.
    auto& headers = const_cast<httplib::Headers&>(req.headers);
    // Ranges are ignored (RFC 9110 14.2 allows it; every reply here is made
    // afresh). httplib would build each range's copy of the reply in memory:
    // "Range: bytes=0-,0-,..." with 1000 ranges made the 27 KB status page
    // a 27.5 MB reply, and took 20 s.
    headers.erase("Range");
    const_cast<httplib::Ranges&>(req.ranges).clear();
    // Replies are compressed with gzip or not at all: httplib prefers
    // brotli where the client lists it (every browser does), at its highest
    // quality, 27 ms of CPU for the 27 KB status page against 1 ms for gzip
    // and 0.2 ms uncompressed.
    if (req.has_header("Accept-Encoding")) {
      bool gzip = false;
      for (size_t i = 0; i < req.get_header_value_count("Accept-Encoding"); ++i)
        gzip = gzip || accepts_gzip(req.get_header_value("Accept-Encoding", i));
      headers.erase("Accept-Encoding");
      if (gzip) headers.emplace("Accept-Encoding", "gzip");
    }
    // An absolute-form target ("GET http://board:8080/health HTTP/1.1", as
    // sent through a proxy) names the resource its path names (RFC 9112
    // 3.2.2: a server must accept it); httplib would route the whole URL.
    if (const std::string_view p = req.path;
        iequals(p.substr(0, 7), "http://") || iequals(p.substr(0, 8), "https://")) {
      const size_t slash = p.find('/', p.find("//") + 2);
      const_cast<std::string&>(req.path) =
          slash == std::string_view::npos ? std::string("/") : std::string(p.substr(slash));
    }
    if (refuse_framing(req, res)) return httplib::Server::HandlerResponse::Handled;
    const bool open_route = req.path == "/health" || req.path == "/ready" || (req.path == "/" && req.method == "GET");
    if ((!o.api_key.empty() || !o.api_key_classes.empty()) && !open_route) {
      const std::string got = req.get_header_value("Authorization");
      bool valid = !o.api_key.empty() && got == "Bearer " + o.api_key;
      for (const auto& [key, cls] : o.api_key_classes) valid = valid || got == "Bearer " + key;
      if (!valid) {
        // Refused before its body is read: the connection closes after.
        close_after_response();
        mark_close(req, res);
        reply_error(res, {401, "invalid_request_error", "invalid_api_key", "missing or wrong API key (Authorization: Bearer ...)", ""});
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // Every body here is JSON, whatever its Content-Type says. httplib
    // would read a form's (curl -d's default type) as a form, refused over
    // 8 KiB with a 413 of its own, and a multipart one as parts, refused as
    // unreadable: such a body is read as it came instead.
    const std::string type = req.get_header_value("Content-Type");
    if (type.rfind("application/x-www-form-urlencoded", 0) == 0 ||
        type.rfind("multipart/form-data", 0) == 0) {
      headers.erase("Content-Type");
      headers.emplace("Content-Type", "application/json");
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // A client that asks before sending its body (Expect: 100-continue) hears
  // a refusal instead of an invitation to upload a body that will not be
  // read (httplib answers 100 before any handler runs).
  http.set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (refuse_framing(req, res)) return res.status;
    // A length over --max-body: httplib's own 413, which the error handler
    return 100;
  });
  http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // Streamed generations count themselves when they end.
    if (!res.content_provider_) metrics.count_status(res.status);
    // While the connection cap is full, this connection is closed after
    // its reply, and the reply says so: a client told to reconnect loses
    // nothing, where one whose idle keep-alive connection is closed under
    // it (to make room) may send a request into the close.
    bool close = WorkerPool::crowded() || res.get_header_value("Connection") == "close";
    // HTTP/1.0: a connection persists only when the client asks with
    // "Connection: Keep-Alive" (httplib's test, to the letter) and the
    // reply's end is known without closing it; the reply says which.
    if (req.version == "HTTP/1.0") {
      const bool by_close =
          res.content_provider_ && !res.is_chunked_content_provider_ && res.content_length_ == 0;
      close = close || by_close || req.get_header_value("Connection") != "Keep-Alive";
      if (!close) res.set_header("Connection", "Keep-Alive");
    }
    if (close) {
      close_after_response();
      res.headers.erase("Keep-Alive");
      mark_close(req, res);
    }
  });
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    // httplib's own refusals (a request it could not read, a body over
    // --max-body) leave the rest of the request on the connection.
    if (res.status != 404 && res.status != 405) {
      close_after_response();
      mark_close(req, res);
    }
    ApiError e{res.status, "invalid_request_error", "", "", ""};
    const auto route = allowed.find(req.path);
    if (res.status == 404 && route != allowed.end()) {
      res.status = 405;
      res.set_header("Allow", route->second);
      e = {405, "invalid_request_error", "method_not_allowed",
           fmt::format("{} takes {}, not {}", req.path, route->second, req.method), ""};
    } else if (res.status == 404)
      e.code = "not_found", e.message = fmt::format("no route for {} {}", req.method, req.path);
    else if (res.status == 413)
      e = body_too_large();
    else if (res.status == 405) e.code = "method_not_allowed", e.message = "method not allowed";
    else if (res.status == 400)
      e = unreadable_request();
    else e.code = "http_error", e.message = fmt::format("HTTP error {}", res.status);
    res.set_content(error_json(e), "application/json");
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
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

  const auto get = [this](const char* path, httplib::Server::Handler h) {
    allowed[path] = "GET, HEAD";
    http.Get(path, std::move(h));
  };
  const auto post = [this](const char* path, httplib::Server::Handler h) {
    allowed[path] = "POST";
    http.Post(path, std::move(h));
  };
  post("/v1/chat/completions",
       [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
  post("/v1/completions",
       [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
  get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(models_json(o.model_id, unix_now(), "edgelm"), "application/json");
  });
  get("/health", [json_reply](const httplib::Request&, httplib::Response& res) {
    json_reply(res, {{"status", "ok"}});
  });
  get("/ready", [this, json_reply](const httplib::Request&, httplib::Response& res) {
    const Decision d = adm.peek();
    if (!d.ok())
      return json_reply(res, {{"status", "not_ready"}, {"reason", reason_name(d.reason)}}, 503);
    json_reply(res, {{"status", "ready"}, {"free_slots", engine.n_slots() - engine.active_slots()}});
  });
  get("/slots", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(slots_json(status_view()), "application/json");
  });
  // The status page is static (served without a key); what it shows comes
  // from /status, which needs the key like the API.
  get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(status_page_html().data(), status_page_html().size(), "text/html; charset=utf-8");
  });
  get("/status", [this](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(status_json(status_view()), "application/json");
  });
  get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(metrics, engine, adm, pool ? pool->open() : 0), "text/plain; version=0.0.4");
  });
  // llama-server's route: the prompt a chat request would be given, exactly.
  post("/apply-template", [this, json_reply](const httplib::Request& req, httplib::Response& res) {
    const TextPermit permit(text_budget, req.body.size(), adm.options().default_class, kTextWait);
    if (!permit.ok()) return reply_busy_preparing(res);
    RequestLimits limits;
    limits.n_vocab = engine.tokenizer().n_vocab();
    limits.max_content_bytes = o.max_body_bytes;
    auto parsed = parse_chat_request(req.body, limits);
    if (auto* err = std::get_if<ApiError>(&parsed)) return reply_error(res, *err);
    if (!chat_template)
      return reply_error(res, {400, "invalid_request_error", "chat_template", chat_template_error, "messages"});
    const GenerationRequest& r = std::get<GenerationRequest>(parsed);
    auto text = chat_template->render(r);
    if (!text.ok())
      return reply_error(res, {400, "invalid_request_error", "invalid_messages", text.message(), "messages"});
    json_reply(res, {{"prompt", *text}});
  });
  post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const TextPermit permit(text_budget, req.body.size(), adm.options().default_class, kTextWait);
    if (!permit.ok()) return reply_busy_preparing(res);
    auto parsed = parse_tokenize_request(req.body);
    if (auto* err = std::get_if<ApiError>(&parsed)) return reply_error(res, *err);
    TokenizeRequest r = std::move(std::get<TokenizeRequest>(parsed));
    const auto& tok = engine.tokenizer();
    const std::vector<int32_t> ids = tok.encode(r.content, r.add_special, r.parse_special);
    r.content = std::string();  // the body's text, before the reply's
    // Written without a JSON tree (16 bytes an id, and a long text's ids are
    // many). with_pieces, as llama-server: {"id": id, "piece": its text},
    // the piece as an array of its bytes when they are not valid UTF-8 (a
    // byte-level token that is part of a character).
    std::string out;
    out.reserve(13 + (fmt::formatted_size("{}", tok.n_vocab()) + 1) * ids.size());
    out += "{\"tokens\":[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ',';
      const fmt::format_int digits(ids[i]);
      if (!r.with_pieces) {
        out.append(digits.data(), digits.size());
        continue;
      }
      out += "{\"id\":";
      out.append(digits.data(), digits.size());
      out += ",\"piece\":";
      const std::string_view piece = tok.token_piece_view(ids[i], true);
      if (tokenizer::utf8_is_valid(piece)) {
        out += json(std::string(piece)).dump();
      } else {
        out += '[';
        for (size_t b = 0; b < piece.size(); ++b) {
          if (b) out += ',';
          out += fmt::format_int(static_cast<unsigned char>(piece[b])).c_str();
        }
        out += ']';
      }
      out += '}';
    }
    out += "]}";
    res.status = 200;
    res.body = std::move(out);  // set_content would copy it
    res.set_header("Content-Type", "application/json");
  });
  post("/detokenize", [this, json_reply](const httplib::Request& req, httplib::Response& res) {
    const TextPermit permit(text_budget, req.body.size(), adm.options().default_class, kTextWait);
    if (!permit.ok()) return reply_busy_preparing(res);
    auto parsed = parse_detokenize_request(req.body, engine.tokenizer().n_vocab());
    if (auto* err = std::get_if<ApiError>(&parsed)) return reply_error(res, *err);
    const std::vector<int32_t> ids = std::move(std::get<std::vector<int32_t>>(parsed));
    // A token's text can be long (a run of spaces or dashes): the text is
    // measured before it is made, and kept within 4x --max-body.
    uint64_t bytes = 0;
    for (const int32_t id : ids) bytes += engine.tokenizer().token_piece_view(id, true).size();
    const uint64_t limit = 4 * static_cast<uint64_t>(o.max_body_bytes);
    if (bytes > limit)
      return reply_error(
          res,
          {400, "invalid_request_error", "text_too_long",
           fmt::format("the text of these tokens would be {} bytes, more than {} (4x --max-body)",
                       bytes, limit),
           "tokens"});
    json_reply(res, {{"content", engine.tokenizer().decode(ids)}});
  });
}

void Server::Impl::sample_status(Clock::time_point now) {
  const double dt = std::chrono::duration<double>(now - last_sample).count();
  const EngineStats st = engine.stats();
  StatusCounters c;
  c.generated = st.generated_tokens;
  c.prompt = st.prompt_tokens;
  for (size_t i = 0; i < adm.options().classes.size(); ++i) c.admitted += adm.admitted(static_cast<int>(i));
  for (size_t r = 0; r < c.refused.size(); ++r) c.refused[r] = metrics.rejections[r].load();
  c.ttft = metrics.ttft.counts();
  c.tpot = metrics.tpot.counts();
  c.busy = st.active;
  c.queued = adm.queued();
  ring.record(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
              dt, c);
  // Each slot's stream: tokens since the last sample, if the same request holds it.
  for (int i = 0; i < engine.n_slots(); ++i) {
    const size_t k = static_cast<size_t>(i);
    const auto state = engine.state(i);
    const bool running = state == Engine::SlotState::Prefill || state == Engine::SlotState::Decode ||
                         state == Engine::SlotState::Finished || state == Engine::SlotState::Queued;
    const uint64_t gen = engine.holder(i).gen;
    const int count = running ? engine.wait_for(i, 1 << 30, now) : 0;
    const bool same = running && gen == slot_gen[k] && last_sample != Clock::time_point{};
    slot_rate[k].store(same && dt > 0 ? static_cast<float>((count - slot_count[k]) / dt) : 0.0f, std::memory_order_relaxed);
    slot_gen[k] = gen;
    slot_count[k] = count;
  }
  last_sample = now;
}

void Server::Impl::watch_memory() {
  // Memory is checked every 250 ms, and the status ring sampled every second
  // on the second (a late wake-up skips ahead rather than bursting).
  auto next_sample = Clock::now();
  while (!stopping.load()) {
    const auto now = Clock::now();
    if (now >= next_sample) {
      sample_status(now);
      next_sample += std::chrono::seconds(1);
      if (next_sample <= now) next_sample = now + std::chrono::seconds(1);
    }
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
    stop_cv.wait_until(lk, std::min(now + std::chrono::milliseconds(250), next_sample), [&] { return stopping.load(); });
  }
}

// ---------------------------------------------------------------------------

bool urgent_requests_possible(const ServerOptions& o) {
  const int dflt = class_index(o.admission.classes, o.default_class);
  if (dflt <= 0) return false;
  if (o.class_header) return true;
  for (const auto& [key, name] : o.api_key_classes) {
    const int c = class_index(o.admission.classes, name);
    if (c >= 0 && c < dflt) return true;
  }
  return false;
}

void resolve_classes(ServerOptions& o) {
  if (const int i = class_index(o.admission.classes, o.default_class); i >= 0) o.admission.default_class = i;
  o.admission.urgent_requests = urgent_requests_possible(o);
}

Server::Server(Engine& engine, const ServerOptions& o)
    : engine_(engine),
      o_(o),
      admission_(std::make_unique<Admission>(engine, [&o] {
        ServerOptions r = o;
        resolve_classes(r);
        return r.admission;
      }())),
      metrics_(std::make_unique<Metrics>()) {
  impl_ = std::make_unique<Impl>(*this);
  const size_t n_slots = static_cast<size_t>(engine.n_slots());
  impl_->slot_rate = std::make_unique<std::atomic<float>[]>(n_slots);
  impl_->slot_gen.assign(n_slots, 0);
  impl_->slot_count.assign(n_slots, 0);
  ChatRendererChoice tmpl = ChatRenderer::for_model(engine.tokenizer(), o.chat_template, o.chat_template_file);
  impl_->chat_template = std::move(tmpl.renderer);
  impl_->chat_template_error = std::move(tmpl.error);
  impl_->chat_template_fatal = tmpl.fatal;
  for (int32_t t = 0; t < engine.tokenizer().n_vocab(); ++t)
    impl_->max_piece = std::max(impl_->max_piece, engine.tokenizer().token_piece_view(t).size());
  impl_->vocab = std::make_shared<const constrain::TokenVocab>(engine.tokenizer());
  const int workers = http_threads_for(o, engine.n_slots());
  const int cap = connection_cap(o, workers);
  impl_->http.new_task_queue = [this, workers, cap, nice = o.http_nice] {
    impl_->pool = new WorkerPool(workers, cap, nice);
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
  // What the Keep-Alive header says; HttpServer keeps to it (Limits).
  impl_->http.set_keep_alive_max_count(1000);
  HttpServer::Limits lim;
  lim.read_timeout = std::chrono::milliseconds(1000 * static_cast<int64_t>(o.read_timeout_s));
  lim.write_timeout = std::chrono::milliseconds(1000 * static_cast<int64_t>(o.write_timeout_s));
  lim.keep_alive = std::chrono::milliseconds(1000 * static_cast<int64_t>(o.keep_alive_s));
  lim.keep_alive_requests = 1000;
  lim.max_body = o.max_body_bytes;
  impl_->http.set_limits(lim);
  impl_->http.set_canned_reply([this](HttpServer::Canned what) {
    switch (what) {
      case HttpServer::Canned::kTooManyConnections:
        impl_->metrics.connections_refused.fetch_add(1);
        impl_->metrics.count_status(503);
        return raw_reply(too_many_connections(), 1);
      case HttpServer::Canned::kUnreadable:
        impl_->metrics.count_status(400);
        return raw_reply(impl_->unreadable_request(), 0);
      case HttpServer::Canned::kBadLength:
        impl_->metrics.count_status(400);
        return raw_reply(invalid_content_length(), 0);
      case HttpServer::Canned::kHeadTooLarge:
        impl_->metrics.count_status(431);
        return raw_reply(head_too_large(), 0);
      case HttpServer::Canned::kUnknownMethod:
        impl_->metrics.count_status(501);
        return raw_reply(unknown_method(), 0);
    }
    return std::string();
  });
  impl_->routes();
}

Server::~Server() { stop(); }

Status Server::bind() {
  if (impl_->chat_template_fatal) return make_error("chat template: {}", impl_->chat_template_error);
  const int p = o_.port == 0 ? impl_->http.bind_to_any_port(o_.host) : (impl_->http.bind_to_port(o_.host, o_.port) ? o_.port : -1);
  if (p <= 0) return make_error("cannot listen on {}:{} (in use, or not an address of this machine)", o_.host, o_.port);
  port_ = p;
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, 1024);
  return Status::Ok();
}

void Server::run() {
  impl_->monitor = std::thread([this] { impl_->watch_memory(); });
  request_short_slice();  // this thread accepts every connection
  impl_->run_state.store(1);
  if (!impl_->stop_asked.load()) impl_->http.listen_after_bind();
  impl_->run_state.store(2);
  {
    // Under the monitor's lock: else the store and the notify could both
    // fall between its check of `stopping` and its wait (a lost wake-up,
    // up to its 250 ms timeout late).
    std::lock_guard<std::mutex> lk(impl_->stop_mu);
    impl_->stopping.store(true);
  }
  impl_->text_budget.stop();
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
    engine_.cancel_all();
    const auto hard = Clock::now() + std::chrono::seconds(5);
    while (engine_.active_slots() > 0 && Clock::now() < hard) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop();
}

void Server::stop() {
  if (!impl_) return;
  impl_->stop_asked.store(true);
  // run() may be on its way into httplib's accept loop, where a stop asked
  // before it runs would be lost (httplib's stop does nothing then): wait
  // for it to be running, then stop it.
  for (int i = 0; i < 1000 && impl_->run_state.load() == 1 && !impl_->http.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (impl_->http.is_running()) impl_->http.stop();
}

}  // namespace edgelm::serve
