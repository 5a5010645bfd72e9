#include "loadgen/plot.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace edgelm::loadgen {

namespace {

// A gnuplot single-quoted string: a quote is doubled.
std::string gp_quote(std::string_view s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += '\'';
    q += c;
  }
  return q + "'";
}

// A shell single-quoted string.
std::string sh_quote(std::string_view s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

}  // namespace

std::string find_gnuplot() {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    const std::string_view dir = rest.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    const std::string exe = fmt::format("{}/gnuplot", dir.empty() ? std::string_view(".") : dir);
    if (::access(exe.c_str(), X_OK) == 0) return exe;
  }
  return {};
}

std::string plot_script(const LoadResult& r, const std::string& png_path) {
  constexpr double kMiB = 1024.0 * 1024.0;
  std::string s;
  // Data first: one block per series, "t value" rows.
  const bool have_rss = !r.rss.empty();
  if (have_rss) {
    s += "$rss << EOD\n";
    for (const auto& x : r.rss)
      s += fmt::format("{:.3f} {:.2f} {:.2f} {:.2f}\n", x.t_s, x.rss / kMiB, x.anon / kMiB,
                       x.file / kMiB);
    s += "EOD\n";
  }
  std::string ok, ttft, r429, other;
  for (const auto& x : r.records) {
    const double lat_ms = std::max(x.latency_s * 1e3, 1e-3);  // log scale: no zeros
    if (x.ok()) {
      ok += fmt::format("{:.4f} {:.3f}\n", x.start_s, lat_ms);
      if (!std::isnan(x.ttft_s))
        ttft += fmt::format("{:.4f} {:.3f}\n", x.start_s, std::max(x.ttft_s * 1e3, 1e-3));
    } else if (x.status == 429 && !x.transport_error()) {
      r429 += fmt::format("{:.4f} {:.3f}\n", x.start_s, lat_ms);
    } else {
      other += fmt::format("{:.4f} {:.3f}\n", x.start_s, lat_ms);
    }
  }
  // Only non-empty series are drawn (gnuplot complains about empty ones).
  struct Series {
    const char* name;
    const std::string* rows;
    const char* style;
  };
  const Series series[] = {
      {"ok", &ok, "with points pt 7 ps 0.6 lc rgb '#1f77b4' title '200 latency'"},
      {"ttft", &ttft, "with points pt 6 ps 0.6 lc rgb '#2ca02c' title '200 TTFT'"},
      {"r429", &r429, "with points pt 2 ps 0.5 lc rgb '#d62728' title '429 latency'"},
      {"other", &other, "with points pt 4 ps 0.7 lc rgb 'black' title 'other / failed'"},
  };
  std::string plot_cmd;
  for (const auto& se : series) {
    if (se.rows->empty()) continue;
    s += fmt::format("${} << EOD\n{}EOD\n", se.name, *se.rows);
    plot_cmd +=
        fmt::format("{}${} using 1:2 {}", plot_cmd.empty() ? "plot " : ", ", se.name, se.style);
  }

  const double x_max = std::max(r.wall_s, r.options.duration_s);
  s += "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
       "  set terminal pngcairo noenhanced size 1200,900 font ',10'\n"
       "} else {\n"
       "  set terminal png noenhanced size 1200,900\n"
       "}\n";
  s += fmt::format("set output {}\n", gp_quote(png_path));
  s += fmt::format("set xrange [0:{:.3f}]\n", x_max);
  s += "set grid\nset key outside right top\nset lmargin 12\nset rmargin 22\n";
  if (have_rss)
    s += "set multiplot layout 2,1 title " +
         gp_quote(fmt::format("edgelm load: {}", r.options.url)) + "\n";
  else
    s += "set title " + gp_quote(fmt::format("edgelm load: {}", r.options.url)) + "\n";
  if (have_rss) {
    s += fmt::format("set title 'server resident memory (pid {})'\n", r.options.pid);
    s += "set ylabel 'MiB'\nset xlabel ''\nset yrange [0:*]\n";
    s += "plot $rss using 1:2 with lines lw 2 title 'VmRSS', "
         "$rss using 1:3 with lines title 'RssAnon', "
         "$rss using 1:4 with lines title 'RssFile (weights, binary)'\n";
    s += "set title 'request latency by start time'\n";
  }
  s +=
      "set ylabel 'ms (log)'\nset xlabel 'seconds since start'\nset logscale y\nset yrange [*:*]\n";
  if (plot_cmd.empty())
    s += "set yrange [0.1:1000]\nset label 'no requests' at graph 0.5, graph 0.5 center\nplot NaN "
         "notitle\n";
  else
    s += plot_cmd + "\n";
  if (have_rss) s += "unset multiplot\n";
  s += "set output\n";
  return s;
}

Status write_plot(const LoadResult& r, const std::string& png_path) {
  const std::string gp = find_gnuplot();
  if (gp.empty())
    return make_error("gnuplot is not installed (apt-get install gnuplot-nox); no plot written");
  const std::string script = plot_script(r, png_path);
  std::FILE* p = ::popen(sh_quote(gp).c_str(), "w");
  if (!p) return make_error("cannot run {}", gp);
  const bool wrote = std::fwrite(script.data(), 1, script.size(), p) == script.size();
  const int st = ::pclose(p);
  if (!wrote || st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return make_error("gnuplot failed (status {}); no plot written to {}", st, png_path);
  return Status::Ok();
}

}  // namespace edgelm::loadgen
