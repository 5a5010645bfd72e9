// edgelm bench: end-to-end speed of the engine on a model — prompt
// processing, single-stream decode, and aggregate decode at several stream
// counts (continuous batching) — as medians of repeated runs; and a memory
// bandwidth probe that gives the decode limit for the model.
#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <thread>
#include <tuple>

#include <fstream>
#include <functional>
#include <sstream>

#include "constrain/json_constraint.h"
#include "core/bytes.h"
#include "core/read_probe.h"
#include "core/region.h"
#include "engine/engine.h"
#include "serve/json_schema.h"
#include "tools/commands.h"
#include "tools/options.h"

namespace edgelm::tools {

namespace {

using Clock = std::chrono::steady_clock;
using secs = std::chrono::duration<double>;

struct BenchFlags {
  PlanFlags plan;
  int prompt = 128;
  int gen = 64;
  std::string streams = "1,2,4,8";
  int reps = 3;
  int depth = 0;
  bool with_depth_0 = false;  // with depth: each repetition also decodes from an empty context
  bool json = false;
  bool bandwidth = false;
  int bandwidth_mib = 1024;  // the probe's fresh buffer
  bool no_pack = false;
  bool sample = false;      // draw as `edgelm run` does by default instead of greedy
  std::string json_schema;  // also decode under this response_format schema (a file)
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Per repetition r: a[r] x scale / b[r] (a and b of one length).
std::vector<double> ratios(const std::vector<double>& a, const std::vector<double>& b,
                           double scale = 1) {
  std::vector<double> out;
  for (size_t r = 0; r < a.size() && r < b.size(); ++r) out.push_back(a[r] * scale / b[r]);
  return out;
}

// Per-repetition values into out: `key`_samples and their median as `key`;
// returns "median (median of n; lo..hi)" with each figure as `fmt_one`
// formats it, for the text line.
std::string put_spread(nlohmann::json& out, const std::string& key, const std::vector<double>& v,
                       const std::function<std::string(double)>& fmt_one) {
  out[key + "_samples"] = v;
  out[key] = median(v);
  if (v.empty()) return "-";
  return fmt::format("{} (median of {}; {}..{})", fmt_one(median(v)), v.size(),
                     fmt_one(*std::min_element(v.begin(), v.end())),
                     fmt_one(*std::max_element(v.begin(), v.end())));
}

// The machine's read bandwidth: probe_read over a fresh buffer of `mib`
// MiB (1 GiB by default, larger than any cache).
BandwidthResult probe_bandwidth(int threads, int mib) {
  const size_t bytes = static_cast<size_t>(mib) << 20;
  auto region = Region::map(bytes, "bandwidth probe");
  if (!region.ok()) return {};
  std::memset(region->data(), 1, bytes);
  return probe_read(region->data(), bytes, threads);
}

std::vector<int32_t> random_prompt(int n, int n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(std::max(n_vocab - 1, 1)));
  return p;
}

// Runs `k` requests at once (prompt of `prompt` tokens each, `gen` tokens out).
// Returns {prefill seconds of the first request, aggregate decode tokens/s}.
// `constraint`, when given, makes each request's output constraint.
// `sample`: each stream draws with the default SamplingParams (temperature
// 0.8, top-k 40, top-p 0.95, min-p 0.05) and its own seed; else greedy.
std::pair<double, double> run_streams(Engine& e, int k, int prompt, int gen, uint64_t seed,
                                      const std::function<std::shared_ptr<TokenConstraint>()>& constraint = {},
                                      bool sample = false) {
  GenerateParams gp;
  if (!sample) gp.sampling.temperature = 0;
  gp.max_tokens = gen;
  gp.ignore_eos = true;
  std::vector<SlotRef> slots;
  const auto t0 = Clock::now();
  for (int i = 0; i < k; ++i) {
    const SlotRef s = e.try_acquire();
    slots.push_back(s);
    if (constraint) gp.constraint = constraint();
    gp.sampling.seed = seed + static_cast<uint64_t>(i) + 1;
    (void)e.submit(s, random_prompt(prompt, e.model().config.n_vocab, seed + static_cast<uint64_t>(i)), gp);
  }
  // Prefill ends when every stream has its first token; decode runs from
  // there until the last stream ends.
  double prefill = 0;
  for (int i = 0; i < k; ++i) {
    e.wait_for(slots[static_cast<size_t>(i)].slot, 0, Clock::now() + std::chrono::minutes(10));
    if (i == 0) prefill = secs(Clock::now() - t0).count();
  }
  const auto t1 = Clock::now();
  for (const SlotRef& s : slots) {
    while (e.finish(s.slot) == Finish::None) e.wait_for(s.slot, 1 << 30, Clock::now() + std::chrono::seconds(10));
  }
  const double dec = secs(Clock::now() - t1).count();
  int tokens = 0;
  for (const SlotRef& s : slots) tokens += e.wait_for(s.slot, 1 << 30, Clock::now()) - 1;
  for (const SlotRef& s : slots) e.release(s);
  return {prefill, tokens / std::max(dec, 1e-9)};
}

// Counts how often the sampler's first pick was refused (a full-vocabulary
// mask), and the time spent in the constraint: a cost that does not depend
// on how loaded the machine's other cores are, unlike the decode rates.
class CountingConstraint final : public TokenConstraint {
 public:
  CountingConstraint(std::shared_ptr<TokenConstraint> c, std::atomic<uint64_t>& masks, std::atomic<uint64_t>& ns)
      : c_(std::move(c)), masks_(masks), ns_(ns) {}
  bool allows(int32_t t, int left) override {
    const auto t0 = Clock::now();
    const bool r = c_->allows(t, left);
    add(t0);
    return r;
  }
  int mask(const float* logits, float* out, int n, int left) override {
    masks_.fetch_add(1);
    const auto t0 = Clock::now();
    const int r = c_->mask(logits, out, n, left);
    add(t0);
    return r;
  }
  void accept(int32_t t) override {
    const auto t0 = Clock::now();
    c_->accept(t);
    add(t0);
  }
  bool done() const override { return c_->done(); }

 private:
  void add(Clock::time_point t0) {
    ns_.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
  }
  std::shared_ptr<TokenConstraint> c_;
  std::atomic<uint64_t>& masks_;
  std::atomic<uint64_t>& ns_;
};

// Single-stream decode with and without the schema's constraint, the two
// alternating in one run (the same machine state for both): medians,
// ranges, and how often the constraint had to mask the whole vocabulary.
int constrained_decode(Engine& e, const BenchFlags& f, nlohmann::json& out) {
  std::ifstream in(f.json_schema);
  std::stringstream text;
  text << in.rdbuf();
  const auto doc = nlohmann::ordered_json::parse(text.str(), nullptr, false);
  if (!in || doc.is_discarded()) {
    fmt::print(stderr, "error: {} is not a readable JSON file\n", f.json_schema);
    return 1;
  }
  const serve::CompiledSchema c = serve::compile_json_schema(doc);
  if (!c.schema) {
    fmt::print(stderr, "error: {}{}: {}\n", f.json_schema, c.path, c.message);
    return 1;
  }
  auto vocab = std::make_shared<const constrain::TokenVocab>(e.tokenizer());
  std::atomic<uint64_t> masks{0}, ns{0};
  auto make = [&]() -> std::shared_ptr<TokenConstraint> {
    return std::make_shared<CountingConstraint>(std::make_shared<constrain::JsonConstraint>(c.schema, vocab), masks, ns);
  };
  std::vector<double> plain, constrained;
  uint64_t tokens = 0;
  for (int r = 0; r < std::max(f.reps, 5); ++r) {
    plain.push_back(run_streams(e, 1, 16, f.gen, 500 + static_cast<uint64_t>(r)).second);
    const auto before = e.stats().generated_tokens;
    constrained.push_back(run_streams(e, 1, 16, f.gen, 500 + static_cast<uint64_t>(r), make).second);
    tokens += e.stats().generated_tokens - before;
  }
  auto range = [](const std::vector<double>& v) {
    return nlohmann::json{{"median", median(v)}, {"min", *std::min_element(v.begin(), v.end())},
                          {"max", *std::max_element(v.begin(), v.end())}};
  };
  double load = 0;
  if (std::FILE* la = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(la, "%lf", &load) != 1) load = 0;
    std::fclose(la);
  }
  const double cost = 1 - median(constrained) / median(plain);
  // The constraint's own time per token against a plain token's time.
  const double us_per_token = tokens ? ns.load() / 1e3 / static_cast<double>(tokens) : 0;
  const double cpu_fraction = us_per_token * 1e-6 * median(plain);
  out["json_schema"] = {{"file", f.json_schema},
                        {"plain_decode_tokens_per_s", range(plain)},
                        {"constrained_decode_tokens_per_s", range(constrained)},
                        {"cost_fraction", cost},
                        {"constrained_tokens", tokens},
                        {"full_masks", masks.load()},
                        {"constraint_us_per_token", us_per_token},
                        {"constraint_fraction_of_plain_token", cpu_fraction},
                        {"runs", plain.size()},
                        {"load_average_1min", load}};
  if (!f.json)
    fmt::print("json schema {}: decode {:.1f} tokens/s plain ({:.1f}..{:.1f}), {:.1f} constrained ({:.1f}..{:.1f}): "
               "{:+.1f}% cost; {} of {} constrained tokens needed a full mask; the constraint took {:.1f} us a token "
               "({:.2f}% of a plain token's time); medians of {} alternating runs, load average {:.2f}\n",
               f.json_schema, median(plain), *std::min_element(plain.begin(), plain.end()),
               *std::max_element(plain.begin(), plain.end()), median(constrained),
               *std::min_element(constrained.begin(), constrained.end()),
               *std::max_element(constrained.begin(), constrained.end()), 100 * cost, masks.load(), tokens,
               us_per_token, 100 * cpu_fraction, plain.size(), load);
  return 0;
}

// One request on slot `slot` whose first `reuse` prompt tokens are the
// slot's cache; returns {seconds to the first token, decode tokens/s}.
std::pair<double, double> run_on_slot(Engine& e, int slot, std::span<const int32_t> prompt, int reuse, int gen) {
  GenerateParams gp;
  gp.sampling.temperature = 0;
  gp.max_tokens = gen;
  gp.ignore_eos = true;
  gp.reuse = std::min(reuse, e.cached_prefix(slot, prompt));
  const SlotRef s = e.try_acquire(slot);
  const auto t0 = Clock::now();
  (void)e.submit(s, prompt, gp);
  e.wait_for(slot, 0, Clock::now() + std::chrono::minutes(10));
  const auto t1 = Clock::now();
  while (e.finish(slot) == Finish::None) e.wait_for(slot, 1 << 30, Clock::now() + std::chrono::seconds(10));
  const double dec = secs(Clock::now() - t1).count();
  const int tokens = e.wait_for(slot, 1 << 30, Clock::now()) - 1;
  e.release(s);
  return {secs(t1 - t0).count(), tokens / std::max(dec, 1e-9)};
}

// As llama-bench -d: `depth` tokens are computed once into slot 0's cache;
// each repetition then times a prompt of `prompt` new tokens after them,
// and separately `gen` decoded tokens after them (a request of the depth
// tokens and one new one). Returns {prompt tokens/s, decode tokens/s}.
// With f.with_depth_0, each repetition then also decodes `gen` tokens on
// slot 1 after a prompt of `prompt` tokens (as a run without --depth),
// into tg0: the two alternate, so a machine whose speed drifts between
// phases moves both sides of each pair.
std::pair<std::vector<double>, std::vector<double>> runs_at_depth(Engine& e, const BenchFlags& f,
                                                                  std::vector<double>* tg0) {
  const int n_vocab = e.model().config.n_vocab;
  const std::vector<int32_t> prefix = random_prompt(f.depth, n_vocab, 7);
  (void)run_on_slot(e, 0, prefix, 0, 2);
  std::vector<double> pp, tg;
  for (int r = 0; r < f.reps; ++r) {
    std::vector<int32_t> p = prefix;
    const auto extra = random_prompt(f.prompt, n_vocab, 100 + static_cast<uint64_t>(r));
    p.insert(p.end(), extra.begin(), extra.end());
    pp.push_back(f.prompt / run_on_slot(e, 0, p, f.depth, 2).first);
    p.resize(static_cast<size_t>(f.depth));
    p.push_back(extra[0]);
    tg.push_back(run_on_slot(e, 0, p, f.depth, f.gen).second);
    if (tg0) tg0->push_back(run_on_slot(e, 1, extra, 0, f.gen).second);
  }
  return {pp, tg};
}

int bench(const BenchFlags& f) {
  auto model = Model::load(f.plan.model);
  if (!model.ok()) {
    fmt::print(stderr, "error: {}\n", model.message());
    return 1;
  }
  const uint64_t weight_bytes = (*model)->weights.bytes();
  std::vector<int> streams;
  for (size_t p = 0; p < f.streams.size();) {
    size_t q = f.streams.find(',', p);
    if (q == std::string::npos) q = f.streams.size();
    const int v = std::atoi(f.streams.substr(p, q - p).c_str());
    if (v < 1 || v > 256) {
      fmt::print(stderr, "error: --streams wants numbers 1..256, got '{}'\n", f.streams);
      return 1;
    }
    streams.push_back(v);
    p = q + 1;
  }
  if (std::find(streams.begin(), streams.end(), 1) == streams.end()) streams.insert(streams.begin(), 1);
  const int max_streams = *std::max_element(streams.begin(), streams.end());
  const int threads = f.plan.threads > 0 ? f.plan.threads : default_threads();

  nlohmann::json out;
  out["model"] = f.plan.model;
  out["weights_bytes"] = weight_bytes;
  out["threads"] = threads;
  if (f.bandwidth) {
    const BandwidthResult bw = probe_bandwidth(threads, f.bandwidth_mib);
    const double gbs = bw.best_gbs;
    out["bandwidth_gb_per_s"] = gbs;
    out["bandwidth_method"] = bw.best;
    nlohmann::json methods = nlohmann::json::object();
    for (const auto& [name, v] : bw.all) methods[name] = v;
    out["bandwidth_methods_gb_per_s"] = methods;
    out["decode_limit_tokens_per_s"] = gbs * 1e9 / static_cast<double>(weight_bytes);
    if (!f.json) {
      for (const auto& [name, v] : bw.all) fmt::print("  read {:.1f} GB/s: {}\n", v, name);
      fmt::print("read bandwidth {:.1f} GB/s with {} threads (the best of the above): decoding {} of weights is bounded near {:.1f} tokens/s\n",
                 gbs, threads, format_bytes(weight_bytes), gbs * 1e9 / static_cast<double>(weight_bytes));
    }
  }

  auto tok = tokenizer::Tokenizer::from_gguf((*model)->file);
  if (!tok.ok()) {
    fmt::print(stderr, "error: {}\n", tok.message());
    return 1;
  }
  PlanFlags pf = f.plan;
  pf.slots = f.with_depth_0 ? std::max(max_streams, 2) : max_streams;
  pf.ctx = std::max(pf.ctx, f.depth + f.prompt + f.gen + 8);
  pf.batch = std::max(pf.batch, f.prompt);
  auto plan = plan_from_flags(**model, pf);
  if (!plan.ok() || !plan->fits()) {
    fmt::print(stderr, "error: {}\n", plan.ok() ? "the benchmark's plan does not fit the budget" : plan.message());
    return 2;
  }
  EngineOptions eo;
  eo.threads = threads;
  eo.pack_weights = !f.no_pack;
  eo.attn_math = parse_attn_math(f.plan.attn_math).value();  // checked by the flag
  eo.isa = resolve_isa(f.plan.isa).value();  // the plan resolved it already
  auto engine = Engine::create(std::move(model).value(), std::move(tok).value(), *plan, eo);
  if (!engine.ok()) {
    fmt::print(stderr, "error: {}\n", engine.message());
    return 1;
  }
  Engine& e = **engine;
  e.start();
  (void)run_streams(e, 1, 8, 4, 1);  // warm-up: page in the weights
  std::optional<BandwidthResult> weights_way;  // the weights' best way to read, with --bandwidth
  if (f.bandwidth && e.model().packed.size() > 0) {
    // The same probe over the packed weights themselves, the bytes decode
    // reads: on a virtual machine two buffers of one process can read at
    // speeds 10-25% apart (where their pages lie in the host's memory), so
    // the fresh buffer above may read faster or slower than the weights.
    const Region& w = e.model().packed;
    const BandwidthResult wr = probe_read(w.data(), w.size(), threads);
    out["weights_read_gb_per_s"] = wr.best_gbs;
    out["weights_read_method"] = wr.best;
    out["weights_read_bytes"] = w.size();
    if (wr.best_gbs > 0) weights_way = wr;  // a pass read something: every later one will
    if (!f.json)
      fmt::print("the packed weights themselves ({} of the {} read per token): {:.1f} GB/s, {}\n",
                 format_bytes(w.size()), format_bytes(weight_bytes), wr.best_gbs, wr.best);
  }

  std::vector<double> pp, tg, tg0, reads;
  if (f.depth > 0) {
    std::tie(pp, tg) = runs_at_depth(e, f, f.with_depth_0 ? &tg0 : nullptr);
  } else {
    for (int r = 0; r < f.reps; ++r) {
      // The weights' read limit right before each repetition's decode, so
      // that the two compare within one phase of a shared host: on a
      // virtual machine the read moves by 10-20% over minutes.
      if (weights_way)
        reads.push_back(read_gbs(weights_way->best_method, weights_way->best_chunks,
                                 e.model().packed.data(), e.model().packed.size(), threads, 2));
      auto [prefill, rate] = run_streams(e, 1, f.prompt, f.gen, 100 + static_cast<uint64_t>(r), {}, f.sample);
      pp.push_back(f.prompt / prefill);
      tg.push_back(rate);
    }
  }
  out["depth"] = f.depth;
  out["attn_math"] = f.plan.attn_math;
  out["prompt_tokens"] = f.prompt;
  out["gen_tokens"] = f.gen;
  out["prompt_tokens_per_s"] = median(pp);
  out["decode_tokens_per_s"] = median(tg);
  out["prompt_samples"] = pp;  // every repetition, for the spread beside the median
  out["decode_samples"] = tg;
  if (!f.json)
    fmt::print("{}prompt {} tokens: {:.1f} tokens/s | decode {} tokens: {:.1f} tokens/s (median of {})\n",
               f.depth > 0 ? fmt::format("depth {}: ", f.depth) : std::string(), f.prompt, median(pp), f.gen,
               median(tg), f.reps);
  if (!reads.empty()) {
    out["weights_read_samples"] = reads;
    const std::string line = put_spread(out, "decode_share_of_weights_read",
                                        ratios(tg, reads, static_cast<double>(weight_bytes) / 1e9),
                                        [](double x) { return fmt::format("{:.0f}%", 100 * x); });
    if (!f.json)
      fmt::print("decode against the weights' read just before each repetition: {}\n", line);
  }
  if (!tg0.empty()) {
    out["depth_0_decode_samples"] = tg0;
    const std::string line = put_spread(out, "depth_ratio", ratios(tg, tg0),
                                        [](double x) { return fmt::format("{:.3f}", x); });
    if (!f.json)
      fmt::print(
          "depth {} against depth 0 (decode {:.1f} tokens/s, median of {}), alternating: {}\n",
          f.depth, median(tg0), tg0.size(), line);
  }
  nlohmann::json arr = nlohmann::json::array();
  for (int k : streams) {
    std::vector<double> agg;
    if (k == 1) {
      agg = tg;
    } else {
      for (int r = 0; r < f.reps; ++r) agg.push_back(run_streams(e, k, 16, f.gen, 1000 + static_cast<uint64_t>(r * 97 + k), {}, f.sample).second);
    }
    arr.push_back({{"streams", k}, {"decode_tokens_per_s", median(agg)}, {"samples", agg}});
    if (!f.json) fmt::print("  {} streams: {:.1f} tokens/s aggregate ({:.1f} per stream)\n", k, median(agg), median(agg) / k);
  }
  out["streams"] = arr;
  if (!f.json_schema.empty() && constrained_decode(e, f, out) != 0) return 1;
  if (f.json) fmt::print("{}\n", out.dump(2));
  e.stop();
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure prompt, decode and batched decode tokens/s (medians)");
  auto f = std::make_shared<BenchFlags>();
  add_plan_flags(cmd, f->plan);
  add_engine_flags(cmd, f->plan);
  f->plan.budget = "auto";
  cmd->add_option("-p,--prompt", f->prompt, "Prompt tokens")->capture_default_str()->check(CLI::Range(1, 65536));
  cmd->add_option("-n,--gen", f->gen, "Generated tokens per stream")->capture_default_str()->check(CLI::Range(2, 65536));
  cmd->add_option("--streams", f->streams, "Stream counts for aggregate decode, comma separated")->capture_default_str();
  cmd->add_option("-d,--depth", f->depth,
                  "Tokens already in the slot's cache before the single-stream prompt and decode are timed (as "
                  "llama-bench -d)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag(
      "--with-depth-0", f->with_depth_0,
      "With --depth: each repetition also decodes from an empty context (after the prompt, as "
      "without "
      "--depth), alternating with the run at depth, and the ratio of each pair is reported");
  cmd->add_option("-r,--reps", f->reps, "Repetitions (the median is reported)")->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_flag("--json", f->json, "Print one JSON object");
  cmd->add_flag("--bandwidth", f->bandwidth,
                "Also probe memory read bandwidth and the decode limit it implies: over a fresh "
                "buffer, then over the packed weights themselves, and (without --depth) over the "
                "weights again right before each repetition, for decode's share of that read");
  cmd->add_option("--bandwidth-mib", f->bandwidth_mib, "Size of the probe's fresh buffer, MiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--no-pack", f->no_pack, "Keep the file's weight layout (no interleaved repacking)");
  cmd->add_flag("--sample", f->sample,
                "Draw tokens with edgelm run's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, "
                "a seed per stream) instead of greedily (--depth runs stay greedy)");
  cmd->add_option("--json-schema", f->json_schema,
                  "Also measure single-stream decode under this JSON schema (a file, as response_format's "
                  "json_schema.schema), alternating with unconstrained runs");
  cmd->callback([f] { set_exit_code(bench(*f)); });
}

}  // namespace edgelm::tools
