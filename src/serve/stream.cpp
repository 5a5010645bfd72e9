#include "serve/stream.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <memory>

#include "serve/chat_answer.h"
#include "serve/openai.h"
#include "serve/stop_matcher.h"
#include "tokenizer/utf8_stream.h"

namespace edgelm::serve {

using Clock = std::chrono::steady_clock;

namespace {

// The state of one admitted request, shared by the content provider (which
// streams it) and the releaser (which frees the slot whatever happens).
struct Session {
  explicit Session(const StreamDeps& d, StreamSpec sp, SlotRef r)
      : deps(d), spec(std::move(sp)), ref(r), stop(spec.stops) {
    if (spec.output) out.emplace(*spec.output);
  }
  // The last holder of the session (the response's provider and releaser,
  // or stream_response itself when it leaves by an exception) gives the
  // slot back if nothing did.
  ~Session() { release_slot(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  StreamDeps deps;
  StreamSpec spec;
  SlotRef ref;
  Clock::time_point t_first, t_last;
  int seen = 0;
  int completion_tokens = 0;
  size_t sent_bytes = 0;  // text bytes streamed so far (completions' text_offset)
  bool stopped_by_string = false;
  bool disconnected = false;
  bool finished = false;
  Finish fin = Finish::None;  // the engine's, once finished
  std::string text;           // non-streamed: the whole output
  std::vector<TokenLogprobOut> logprobs;
  tokenizer::Utf8Stream utf8;
  StopMatcher stop;
  std::optional<ChatOutput> out;  // tools / thinking: the answer's parser
  // "tool_calls" when the parsed answer called a tool.
  std::string finish_reason() const {
    if (out && out->tool_calls() > 0) return "tool_calls";
    return std::string(finish_name(fin));
  }

  // Prompt tokens that were not computed (the slot's cache and what was
  // copied into it): known from the engine once the request has started,
  // read while the slot is held; -1 until then.
  int cached = -1;
  void note_cached() {
    if (cached >= 0) return;
    cached = deps.engine.reused_tokens(ref.slot);
    deps.metrics.prompt_tokens_reused.fetch_add(static_cast<uint64_t>(cached));
  }

  // The answer broke off by an exception inside it (a failed allocation):
  // a server error, not the client's going.
  bool broke = false;

  bool released = false;
  // Gives the slot back (cancelling it if it still runs) and hands it on; once.
  void release_slot() {
    if (released) return;
    released = true;
    deps.admission.release(ref);
  }
  // How this request ended, for logs and metrics.
  std::string_view end() const {
    if (broke) return "error";
    if (disconnected || !finished) return "disconnected";
    if (stopped_by_string) return "stop";
    return finish_name(fin);
  }
  // ... and as an HTTP status: the one sent when nothing had gone out
  // before the end, the one counted in any case.
  int status() const {
    const std::string_view e = end();
    if (e == "disconnected") return 499;
    if (e == "cancelled") return 503;
    if (e == "error") return 500;
    return 200;
  }
};

// An answer the engine did not finish on its own terms: the client is told
// so in OpenAI's error shape, never with a finish_reason.
ApiError ended_early(Finish f) {
  if (f == Finish::Cancelled)
    return {503, "server_error", "cancelled", "the server cancelled this request (it is shutting down)", ""};
  return {500, "server_error", "engine_error", "the engine failed while generating this answer", ""};
}

bool ended_normally(Finish f) { return f == Finish::Stop || f == Finish::Length || f == Finish::Preempted; }

}  // namespace

void stream_response(httplib::Response& res, const StreamDeps& deps, StreamSpec spec, SlotRef ref) {
  std::shared_ptr<Session> s;
  try {
    s = std::make_shared<Session>(deps, std::move(spec), ref);
  } catch (...) {
    // No session to own the slot (a failed allocation): give it back here.
    deps.admission.release(ref);
    throw;
  }
  const bool streaming = s->spec.stream;
  res.set_header("Cache-Control", "no-cache");
  if (s->spec.dropped > 0) res.set_header("X-Edgelm-Prompt-Tokens-Dropped", std::to_string(s->spec.dropped));

  // Runs the answer to its end, writing to `sink`. A non-streamed answer
  // may stop early at `pause` (its state stays in the session and a later
  // call goes on): until then it writes nothing, not even a heartbeat.
  auto run = [s](httplib::DataSink& sink, Clock::time_point pause) -> bool {
    Engine& e = s->deps.engine;
    const StreamSpec& sp = s->spec;
    const int slot = s->ref.slot;
    const tokenizer::Tokenizer& t = e.tokenizer();
    Metrics& m = s->deps.metrics;
    const auto heartbeat = std::chrono::milliseconds(s->deps.heartbeat_ms);
    auto last_write = Clock::now();
    auto write = [&](const std::string& data) {
      if (s->disconnected) return false;
      last_write = Clock::now();
      if (!sink.write(data.data(), data.size())) s->disconnected = true;
      return !s->disconnected;
    };
    auto usage = [&]() {
      Usage u;
      u.prompt_tokens = sp.n_prompt;
      u.completion_tokens = s->completion_tokens;
      u.prompt_tokens_dropped = sp.dropped;
      u.cached_tokens = std::max(s->cached, 0);
      return u;
    };
    std::string piece_out, emit;
    bool first_chunk = true;
    const bool pausing = pause != Clock::time_point::max();
    while (!s->finished) {
      if (pausing && Clock::now() >= pause) return true;
      const int before = s->seen;
      const int n = e.wait_for(slot, s->seen, std::min(Clock::now() + heartbeat, pause));
      const bool idle = n == before;  // the wait timed out with nothing new
      emit.clear();
      std::vector<TokenLogprobOut> chunk_lps;
      for (; s->seen < n && !s->stopped_by_string; ++s->seen) {
        const auto now = Clock::now();
        if (s->seen == 0) {
          s->note_cached();
          s->t_first = now;
          m.ttft.observe(std::chrono::duration<double>(now - sp.t0).count());
          s->deps.admission.observe_ttft(sp.predicted_ttft,
                                         std::chrono::duration<double>(now - sp.t_admitted).count());
        }
        s->t_last = now;
        const int32_t tok_id = e.output_token(slot, s->seen);
        ++s->completion_tokens;
        const std::string_view piece = t.token_piece_view(tok_id);
        if (sp.top_logprobs >= 0) {
          TokenLogprob top[kMaxTopLogprobs];
          const int k = std::min(sp.top_logprobs, kMaxTopLogprobs);
          TokenLogprobOut lp;
          lp.token = std::string(piece);
          lp.logprob = e.output_logprob(slot, s->seen, std::span<TokenLogprob>(top, static_cast<size_t>(k)));
          for (int i = 0; i < k; ++i) lp.top.emplace_back(t.token_piece(top[i].token), top[i].logprob);
          chunk_lps.push_back(std::move(lp));
        }
        piece_out.clear();
        s->utf8.push(piece, piece_out);
        if (s->stop.push(piece_out, emit)) {
          s->stopped_by_string = true;
          e.cancel(s->ref);
        }
      }
      const Finish fin = e.finish(slot);
      const bool engine_done = fin != Finish::None && e.wait_for(slot, s->seen, Clock::now()) == s->seen;
      if (s->stopped_by_string || engine_done) {
        if (!s->stopped_by_string && ended_normally(fin)) {
          piece_out.clear();
          s->utf8.flush(piece_out);
          s->stop.push(piece_out, emit);
          s->stop.flush(emit);
        }
        s->finished = true;
        s->fin = s->stopped_by_string ? Finish::Stop : fin;
        s->note_cached();
        // Every token is read: the slot is free before the last bytes go
        // out. Nothing below touches the slot again (a stale reference could
        // not harm its next holder anyway). A stop string ended it while the
        // engine still runs it: the releaser gives it back after the last
        // bytes, so they do not wait for the engine's step.
        if (engine_done) s->release_slot();
      }
      const bool failed = s->finished && !ended_normally(s->fin);
      if (sp.stream) {
        // A chat's first chunk (role "assistant", as OpenAI sends it) goes out
        // with the first token even when that token's text is still an
        // incomplete character: the client sees the answer start on time.
        if (s->out) {
          const auto* lps = chunk_lps.empty() ? nullptr : &chunk_lps;
          const std::string ev = chat_output_events(*s->out, sp.id, sp.created, sp.model, emit, s->finished && !failed,
                                                    s->seen > 0 && !failed, first_chunk, lps);
          if (!ev.empty()) {
            if (!write(ev)) break;
          } else if (!s->finished && idle) {
            if (!write(": keep-alive\n\n")) break;
          }
        } else if (!emit.empty() || !chunk_lps.empty() || (sp.chat && first_chunk && s->seen > 0 && !failed)) {
          const auto* lps = chunk_lps.empty() ? nullptr : &chunk_lps;
          const std::string j = sp.chat ? chat_chunk_json(sp.id, sp.created, sp.model, emit, first_chunk, "", lps)
                                        : completion_chunk_json(sp.id, sp.created, sp.model, emit, "", lps, s->sent_bytes);
          s->sent_bytes += emit.size();
          first_chunk = false;
          if (!write(sse_event(j))) break;
        } else if (!s->finished && idle) {
          // Nothing new: an SSE comment keeps proxies patient and reveals a
          // client that has gone away.
          if (!write(": keep-alive\n\n")) break;
        }
        if (failed) {
          if (!write(sse_event(error_json(ended_early(s->fin))))) break;
        } else if (s->finished) {
          const std::string reason = s->finish_reason();
          const std::string j = sp.chat ? chat_chunk_json(sp.id, sp.created, sp.model, "", first_chunk, reason, nullptr)
                                        : completion_chunk_json(sp.id, sp.created, sp.model, "", reason, nullptr);
          if (!write(sse_event(j))) break;
          if (sp.include_usage && !write(sse_event(usage_chunk_json(sp.id, sp.created, sp.model, usage(), sp.chat)))) break;
          if (!write(sse_done())) break;
        }
      } else {
        s->text += emit;
        for (auto& lp : chunk_lps) s->logprobs.push_back(std::move(lp));
        if (failed) {
          if (!write(error_json(ended_early(s->fin)))) break;
        } else if (s->finished) {
          const auto* lps = sp.top_logprobs >= 0 ? &s->logprobs : nullptr;
          std::string j;
          if (s->out) {
            std::vector<ChatDelta> ds;
            s->out->push(s->text, ds);
            s->out->finish(ds);
            j = chat_completion_json(sp.id, sp.created, sp.model, join_deltas(ds), s->finish_reason(), usage(), lps);
          } else {
            const std::string reason(finish_name(s->fin));
            j = sp.chat ? chat_completion_json(sp.id, sp.created, sp.model, s->text, reason, usage(), lps)
                        : completion_json(sp.id, sp.created, sp.model, s->text, reason, usage(), lps);
          }
          if (!write(j)) break;
        } else if (!pausing && (idle || Clock::now() - last_write >= heartbeat)) {
          // JSON allows leading whitespace: a space now and then keeps the
          // connection honest while the answer is generated, and a failed
          // write tells us the client has gone.
          if (!write(" ")) break;
        }
      }
    }
    if (s->disconnected) {
      s->release_slot();  // cancels the request if it still runs
      return false;
    }
    sink.done();
    return true;
  };

  // `chunked`: the status line (200) went out before the answer ended, and
  // the status of what happened is counted here. Otherwise the response
  // carries that status, which the routes' wrapper counts.
  auto releaser = [s](bool chunked) {
    Metrics& m = s->deps.metrics;
    Engine& e = s->deps.engine;
    s->release_slot();
    const auto now = Clock::now();
    const std::string_view end = s->end();
    const int status = s->status();
    if (chunked && status >= 500)
      spdlog::warn("req={} failed after its status line (200) went out: {} status={} code={}", s->spec.id,
                   s->spec.stream ? "an SSE error event ends the stream" : "the body is an error object", status,
                   ended_early(s->fin).code);
    if (status == 499) m.client_disconnects.fetch_add(1);
    if (chunked) m.count_status(status);
    m.count_end(end);
    m.generated_tokens.fetch_add(static_cast<uint64_t>(s->completion_tokens));
    m.request_seconds.observe(std::chrono::duration<double>(now - s->spec.t0).count());
    if (s->completion_tokens > 1)
      m.tpot.observe(std::chrono::duration<double>(s->t_last - s->t_first).count() / (s->completion_tokens - 1));
    spdlog::info("release req={} slot={} active={}/{} end={} status={} prompt={} completion={} ms={}", s->spec.id,
                 s->ref.slot, e.active_slots(), e.n_slots(), end, status, s->spec.n_prompt, s->completion_tokens,
                 std::chrono::duration_cast<std::chrono::milliseconds>(now - s->spec.t0).count());
  };
  if (!streaming) {
    // Nothing is sent for the first heartbeat interval: an answer that ends
    // (or fails) by then goes out whole, with its real status code. Only a
    // longer one gets the status line 200 and heartbeats, and if it fails
    // after all, a body in OpenAI's error shape (counted by what happened).
    std::string body;
    httplib::DataSink buffer;
    buffer.write = [&body](const char* d, size_t n) {
      body.append(d, n);
      return true;
    };
    buffer.done = [] {};
    buffer.is_writable = [] { return true; };
    run(buffer, Clock::now() + std::chrono::milliseconds(deps.heartbeat_ms));
    if (s->finished) {
      res.status = s->status();
      res.set_content(std::move(body), "application/json");
      releaser(false);
      return;
    }
  }
  // An exception must not leave the provider: the connection's worker
  // would end the whole process with it. The stream ends there instead
  // (the connection is closed), counted as a server error.
  auto provider = [s, run](size_t, httplib::DataSink& sink) {
    try {
      return run(sink, Clock::time_point::max());
    } catch (const std::exception& ex) {
      spdlog::error("req={} the answer broke off: {}", s->spec.id, ex.what());
    } catch (...) {
      spdlog::error("req={} the answer broke off", s->spec.id);
    }
    s->broke = true;
    s->release_slot();  // cancels the request if it still runs
    return false;
  };
  const char* type = streaming ? "text/event-stream" : "application/json";
  if (s->spec.close_delimited)
    res.set_content_provider(type, provider, [releaser](bool) { releaser(true); });
  else
    res.set_chunked_content_provider(type, provider, [releaser](bool) { releaser(true); });
}

}  // namespace edgelm::serve
