#include "loadgen/rss_sampler.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace edgelm::loadgen {

namespace {

// "VmRSS:	  123456 kB" -> bytes.
std::optional<uint64_t> field_kb(std::string_view text, std::string_view name) {
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string_view::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    pos += name.size();
    if (!line_start || pos >= text.size() || text[pos] != ':') continue;
    ++pos;
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
    uint64_t kb = 0;
    auto [end, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), kb);
    if (ec != std::errc()) return std::nullopt;
    (void)end;
    return kb * 1024;
  }
  return std::nullopt;
}

}  // namespace

std::optional<RssSample> parse_proc_status(std::string_view text) {
  auto rss = field_kb(text, "VmRSS");
  if (!rss) return std::nullopt;
  RssSample s;
  s.rss = *rss;
  s.anon = field_kb(text, "RssAnon").value_or(0);
  s.file = field_kb(text, "RssFile").value_or(0);
  return s;
}

Result<int> RssSampler::check_pid(int pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  std::ifstream in(path);
  if (!in) return make_error("cannot read {} (no such process?)", path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!parse_proc_status(ss.str()))
    return make_error("{} has no VmRSS line (a kernel thread or a zombie?)", path);
  return pid;
}

RssSampler::RssSampler(int pid, Clock::time_point t0, std::chrono::milliseconds interval)
    : pid_(pid), t0_(t0), interval_(interval) {
  samples_.reserve(4096);
  thread_ = std::thread([this] { loop(); });
}

RssSampler::~RssSampler() {
  stop();
}

bool RssSampler::sample() {
  // Read the whole file in one go; /proc files are generated on read.
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::stringstream ss;
  if (in) ss << in.rdbuf();
  const auto now = Clock::now();
  auto s = parse_proc_status(ss.str());
  if (!s) {
    if (exited_at_s_ < 0) exited_at_s_ = std::chrono::duration<double>(now - t0_).count();
    return false;
  }
  s->t_s = std::chrono::duration<double>(now - t0_).count();
  std::lock_guard lock(mu_);
  samples_.push_back(*s);
  return true;
}

void RssSampler::loop() {
  auto next = Clock::now();
  while (!stop_.load()) {
    if (!sample()) return;  // the process is gone
    next += interval_;
    // Sleep in small steps so stop() returns promptly.
    while (!stop_.load() && Clock::now() < next)
      std::this_thread::sleep_for(
          std::min<Clock::duration>(next - Clock::now(), std::chrono::milliseconds(20)));
  }
}

std::vector<RssSample> RssSampler::stop() {
  if (!stop_.exchange(true) && thread_.joinable()) {
    thread_.join();
    if (exited_at_s_ < 0) sample();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  return samples_;
}

}  // namespace edgelm::loadgen
