#include "loadgen/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "loadgen/stats.h"

namespace edgelm::loadgen {

namespace {

using json = nlohmann::json;

json number_or_null(double v) {
  return std::isnan(v) ? json(nullptr) : json(v);
}

json summary_json(const Summary& s) {
  return {{"count", s.count},
          {"mean", number_or_null(s.mean)},
          {"min", number_or_null(s.min)},
          {"p50", number_or_null(s.p50)},
          {"p90", number_or_null(s.p90)},
          {"p99", number_or_null(s.p99)},
          {"max", number_or_null(s.max)}};
}

// The values of `field` (seconds) of the records that pass `keep`, in ms.
template <typename Keep, typename Field>
Summary ms_summary(const std::vector<RequestRecord>& recs, Keep keep, Field field) {
  std::vector<double> v;
  v.reserve(recs.size());
  for (const auto& r : recs)
    if (keep(r)) v.push_back(field(r) * 1e3);
  return summarize(std::move(v));
}

// Every gap between content chunks of every 200 stream, in ms (inter-token
// latency: the tail a reader of the stream sees, which a per-request mean hides).
Summary itl_summary(const std::vector<RequestRecord>& recs) {
  std::vector<double> v;
  for (const auto& r : recs)
    if (r.ok())
      for (float g : r.gaps_s) v.push_back(static_cast<double>(g) * 1e3);
  return summarize(std::move(v));
}

json rss_json(const LoadResult& r) {
  if (r.options.pid <= 0) return nullptr;
  json j;
  j["pid"] = r.options.pid;
  j["interval_ms"] = r.options.rss_interval_ms;
  j["samples"] = r.rss.size();
  j["server_exited_at_s"] = r.server_exited_at_s >= 0 ? json(r.server_exited_at_s) : json(nullptr);
  if (r.rss.empty()) return j;
  uint64_t peak = 0, peak_anon = 0;
  for (const auto& s : r.rss) peak = std::max(peak, s.rss), peak_anon = std::max(peak_anon, s.anon);
  // Steady: the median of the second half, and how far that half strays from it.
  const size_t half = r.rss.size() / 2;
  std::vector<double> second, second_anon;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t i = half; i < r.rss.size(); ++i) {
    second.push_back(static_cast<double>(r.rss[i].rss));
    second_anon.push_back(static_cast<double>(r.rss[i].anon));
    lo = std::min(lo, r.rss[i].rss);
    hi = std::max(hi, r.rss[i].rss);
  }
  const double steady = median(second);
  // Warm-up: the first sample taken after the first 200 ended.
  double first_ok_end = -1;
  for (const auto& rec : r.records)
    if (rec.ok()) {
      const double end = rec.start_s + rec.latency_s;
      if (first_ok_end < 0 || end < first_ok_end) first_ok_end = end;
    }
  json warm = nullptr;
  if (first_ok_end >= 0) {
    for (const auto& s : r.rss)
      if (s.t_s >= first_ok_end) {
        warm = {{"t_s", s.t_s}, {"bytes", s.rss}};
        break;
      }
  }
  j["first_bytes"] = r.rss.front().rss;
  j["last_bytes"] = r.rss.back().rss;
  j["peak_bytes"] = peak;
  j["peak_anon_bytes"] = peak_anon;
  j["steady_bytes"] = steady;
  j["steady_anon_bytes"] = median(second_anon);
  j["second_half_min_bytes"] = lo;
  j["second_half_max_bytes"] = hi;
  j["after_warmup"] = warm;
  j["steady_vs_warmup"] =
      warm.is_null() ? json(nullptr) : json(steady / warm["bytes"].get<double>() - 1.0);
  json series = json::array();
  for (const auto& s : r.rss) series.push_back({s.t_s, s.rss, s.anon, s.file});
  j["series_t_rss_anon_file"] = std::move(series);
  return j;
}

std::string fmt_ms(const json& v) {
  return v.is_number() ? fmt::format("{:.1f}", v.get<double>()) : "-";
}
std::string fmt_mib(const json& v) {
  return v.is_number() ? fmt::format("{:.1f} MiB", v.get<double>() / (1024.0 * 1024.0)) : "-";
}

// A field as it must appear in CSV: quoted when it holds a comma, quote or line end.
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char ch : v) {
    if (ch == '"') q += '"';
    q += ch;
  }
  return q + '"';
}

std::string csv_num(double v, double scale) {
  return std::isnan(v) ? "" : fmt::format("{:.3f}", v * scale);
}

}  // namespace

json report_json(const LoadResult& r) {
  const auto& o = r.options;
  const auto& recs = r.records;
  json j;
  j["config"] = {{"turns", o.turns},
                 {"system_tokens", o.system_tokens},
                 {"url", o.url},
                 {"mode", r.open_loop ? "open" : "closed"},
                 {"concurrency", r.concurrency},
                 {"rate", o.rate},
                 {"duration_s", o.duration_s},
                 {"prompt_tokens", o.prompt_tokens},
                 {"max_tokens", o.max_tokens},
                 {"stream", o.stream},
                 {"chat", o.chat},
                 {"timeout_s", o.timeout_s},
                 {"seed", o.seed}};
  j["start_unix"] = r.unix_start;
  j["wall_s"] = r.wall_s;
  j["client_cpu_s"] = r.client_cpu_s;

  std::map<std::string, uint64_t> by_status, transport, codes, transport_status;
  uint64_t ok = 0, tokens = 0, answered = 0;
  for (const auto& rec : recs) {
    if (rec.transport_error()) {
      ++transport[rec.transport];
      if (rec.status != 0) ++transport_status[std::to_string(rec.status)];
    } else {
      ++by_status[std::to_string(rec.status)];
      ++answered;
    }
    if (!rec.error.empty()) ++codes[rec.error];
    if (rec.ok()) {
      ++ok;
      tokens += static_cast<uint64_t>(rec.tokens);
    }
  }
  uint64_t n_transport = 0;
  for (const auto& [k, n] : transport) n_transport += n;
  j["requests"] = {{"sent", recs.size()},
                   {"answered", answered},
                   {"by_status", by_status},
                   {"error_codes", codes},
                   {"transport_errors",
                    {{"total", n_transport},
                     {"by_kind", transport},
                     {"status_before_failure", transport_status}}},
                   {"client_dropped", r.client_dropped}};

  auto is_ok = [](const RequestRecord& x) { return x.ok(); };
  auto is_429 = [](const RequestRecord& x) { return x.status == 429 && !x.transport_error(); };
  j["ok"] = {
      {"count", ok},
      {"tokens", tokens},
      {"ttft_ms", summary_json(ms_summary(recs, is_ok, [](auto& x) { return x.ttft_s; }))},
      {"tpot_ms", summary_json(ms_summary(recs, is_ok, [](auto& x) { return x.tpot_s; }))},
      {"latency_ms", summary_json(ms_summary(recs, is_ok, [](auto& x) { return x.latency_s; }))},
      {"max_gap_ms", summary_json(ms_summary(recs, is_ok, [](auto& x) { return x.max_gap_s; }))},
      {"itl_ms", summary_json(itl_summary(recs))}};
  // The server's own prediction of each admitted request's first token
  // (edgelm sends it), against what arrived: measured / predicted.
  std::vector<double> ratio;
  size_t within = 0;
  for (const auto& x : recs) {
    if (!x.ok() || std::isnan(x.ttft_s) || std::isnan(x.predicted_ttft_s) || x.predicted_ttft_s <= 0) continue;
    ratio.push_back(x.ttft_s / x.predicted_ttft_s);
    within += std::abs(x.ttft_s - x.predicted_ttft_s) <= 0.25 * x.ttft_s;
  }
  if (!ratio.empty())
    j["ok"]["ttft_vs_predicted"] = {{"ratio", summary_json(summarize(ratio))}, {"within_25pct", within}};
  std::vector<double> retry;
  for (const auto& x : recs)
    if (is_429(x)) retry.push_back(x.retry_after_s);
  j["status_429"] = {
      {"count", by_status.count("429") ? by_status["429"] : 0},
      {"latency_ms", summary_json(ms_summary(recs, is_429, [](auto& x) { return x.latency_s; }))},
      // From the moment the request left the load generator: the server's
      // side, without the generator's own lag behind its schedule (which a
      // client on another machine would not have).
      {"latency_from_send_ms", summary_json(ms_summary(recs, is_429, [](auto& x) { return x.latency_s - x.lag_s; }))},
      {"retry_after_s", summary_json(summarize(std::move(retry)))}};
  j["client_lag_ms"] = summary_json(ms_summary(
      recs, [](auto&) { return true; }, [](auto& x) { return x.lag_s; }));
  const double wall = r.wall_s > 0 ? r.wall_s : 1;
  j["throughput"] = {{"requests_per_s", static_cast<double>(answered) / wall},
                     {"ok_per_s", static_cast<double>(ok) / wall},
                     {"tokens_per_s", static_cast<double>(tokens) / wall}};
  j["rss"] = rss_json(r);
  if (r.options.turns > 0) {
    // Conversations: time to first token by turn (later turns carry the
    // history: prompt reuse shows here).
    json turns = json::array();
    for (int t = 1; t <= r.options.turns; ++t) {
      auto of_turn = [t](const RequestRecord& x) { return x.ok() && x.turn == t; };
      turns.push_back({{"turn", t}, {"ttft_ms", summary_json(ms_summary(recs, of_turn, [](auto& x) { return x.ttft_s; }))},
                       {"latency_ms", summary_json(ms_summary(recs, of_turn, [](auto& x) { return x.latency_s; }))}});
    }
    j["turns"] = turns;
  }
  return j;
}

std::string format_report(const json& j) {
  std::string s;
  const auto& c = j["config"];
  s += fmt::format(
      "load: {} loop, {} {}, {:.0f} s, prompt ~{} tokens, max_tokens {}, {}{}\n",
      c["mode"].get<std::string>(), c["concurrency"].get<int>(),
      c["mode"] == "open" ? "in flight at most" : "clients", c["duration_s"].get<double>(),
      c["prompt_tokens"].get<int>(), c["max_tokens"].get<int>(),
      c["stream"].get<bool>() ? "streamed" : "not streamed", c["chat"].get<bool>() ? ", chat" : "");
  if (c["mode"] == "open")
    s += fmt::format("      Poisson arrivals at {:.2f} requests/s\n", c["rate"].get<double>());
  const auto& rq = j["requests"];
  std::string statuses;
  for (const auto& [k, v] : rq["by_status"].items())
    statuses += fmt::format(" {}={}", k, v.get<uint64_t>());
  s += fmt::format("requests: {} sent, by status:{}\n", rq["sent"].get<uint64_t>(),
                   statuses.empty() ? " none" : statuses);
  const auto& te = rq["transport_errors"];
  std::string kinds;
  for (const auto& [k, v] : te["by_kind"].items())
    kinds += fmt::format(" {}={}", k, v.get<uint64_t>());
  s += fmt::format("          transport errors: {}{}; client-side drops: {}\n",
                   te["total"].get<uint64_t>(), kinds, rq["client_dropped"].get<uint64_t>());
  if (!rq["error_codes"].empty()) {
    std::string codes;
    for (const auto& [k, v] : rq["error_codes"].items())
      codes += fmt::format(" {}={}", k, v.get<uint64_t>());
    s += fmt::format("          error codes:{}\n", codes);
  }
  auto line = [&](const char* name, const json& sm) {
    s += fmt::format("  {:<12} n={:<6} p50 {:>9}  p90 {:>9}  p99 {:>9}  max {:>9} ms\n", name,
                     sm["count"].get<size_t>(), fmt_ms(sm["p50"]), fmt_ms(sm["p90"]),
                     fmt_ms(sm["p99"]), fmt_ms(sm["max"]));
  };
  s += "200s:\n";
  line("TTFT", j["ok"]["ttft_ms"]);
  if (j["ok"].contains("ttft_vs_predicted")) {
    const json& v = j["ok"]["ttft_vs_predicted"];
    const json& q = v["ratio"];
    s += fmt::format("  {:<12} n={:<6} measured / the server's prediction: min {:.2f}  p50 {:.2f}  max {:.2f}; "
                     "within 25%: {}\n",
                     "TTFT", q["count"].get<size_t>(), q["min"].get<double>(), q["p50"].get<double>(),
                     q["max"].get<double>(), v["within_25pct"].get<size_t>());
  }
  line("TPOT", j["ok"]["tpot_ms"]);
  line("token gaps", j["ok"]["itl_ms"]);
  line("latency", j["ok"]["latency_ms"]);
  if (j.contains("turns")) {
    for (const auto& t : j["turns"]) line(fmt::format("TTFT turn {}", t["turn"].get<int>()).c_str(), t["ttft_ms"]);
  }
  s += "429s:\n";
  line("latency", j["status_429"]["latency_ms"]);
  line("from send", j["status_429"]["latency_from_send_ms"]);
  const auto& t = j["throughput"];
  s += fmt::format(
      "throughput: {:.2f} requests/s answered, {:.2f} ok/s, {:.1f} tokens/s over {:.1f} s "
      "(the load generator used {:.1f} s of CPU)\n",
      t["requests_per_s"].get<double>(), t["ok_per_s"].get<double>(),
      t["tokens_per_s"].get<double>(), j["wall_s"].get<double>(), j["client_cpu_s"].get<double>());
  const auto& lag = j["client_lag_ms"];
  if (lag["max"].is_number() && lag["max"].get<double>() > 50)
    s += fmt::format(
        "warning: the load generator itself fell behind (send lag p99 {} ms, max {} ms)\n",
        fmt_ms(lag["p99"]), fmt_ms(lag["max"]));
  const auto& rss = j["rss"];
  if (rss.is_object()) {
    if (rss["samples"].get<size_t>() > 0) {
      s += fmt::format("server RSS: peak {}, steady {} (second half {} .. {}), after warm-up {}",
                       fmt_mib(rss["peak_bytes"]), fmt_mib(rss["steady_bytes"]),
                       fmt_mib(rss["second_half_min_bytes"]), fmt_mib(rss["second_half_max_bytes"]),
                       rss["after_warmup"].is_object() ? fmt_mib(rss["after_warmup"]["bytes"])
                                                       : std::string("-"));
      if (rss["steady_vs_warmup"].is_number())
        s += fmt::format(" ({:+.2f}%)", rss["steady_vs_warmup"].get<double>() * 100);
      s += fmt::format("; {} samples\n", rss["samples"].get<size_t>());
    }
    if (rss["server_exited_at_s"].is_number())
      s += fmt::format("warning: the server process (pid {}) disappeared at t={:.1f} s\n",
                       rss["pid"].get<int>(), rss["server_exited_at_s"].get<double>());
  }
  return s;
}

std::string records_csv(const LoadResult& r) {
  std::vector<const RequestRecord*> order;
  order.reserve(r.records.size());
  for (const auto& x : r.records) order.push_back(&x);
  std::stable_sort(order.begin(), order.end(),
                   [](auto* a, auto* b) { return a->start_s < b->start_s; });
  std::string s =
      "start_s,status,error,transport,retry_after_s,ttft_ms,tpot_ms,latency_ms,tokens,chunks,max_"
      "gap_ms,predicted_ttft_ms,lag_ms\n";
  for (const auto* x : order) {
    s += fmt::format("{:.4f},{},{},{},{},{},{},{},{},{},{},{},{}\n", x->start_s, x->status,
                     csv_field(x->error), x->transport, csv_num(x->retry_after_s, 1),
                     csv_num(x->ttft_s, 1e3), csv_num(x->tpot_s, 1e3), csv_num(x->latency_s, 1e3),
                     x->tokens, x->chunks, csv_num(x->max_gap_s, 1e3), csv_num(x->predicted_ttft_s, 1e3),
                     csv_num(x->lag_s, 1e3));
  }
  return s;
}

Status write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return make_error("cannot write {}: {}", path, std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) return make_error("cannot write {}: {}", path, std::strerror(errno));
  return Status::Ok();
}

}  // namespace edgelm::loadgen
