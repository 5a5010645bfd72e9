// A PNG of a load run drawn by gnuplot: the server's resident memory over
// time (when it was sampled) above the latency of every request by its start
// time (200s and their TTFT, 429s, the rest), on a log scale.
#pragma once

#include <string>

#include "core/status.h"
#include "loadgen/load.h"

namespace edgelm::loadgen {

// The path of the gnuplot executable on PATH, or "" when there is none.
std::string find_gnuplot();

// The gnuplot program that draws `r` into `png_path`, data inline
// (datablocks), picking pngcairo when the build has it, else png.
std::string plot_script(const LoadResult& r, const std::string& png_path);

// Runs gnuplot on plot_script. Fails when gnuplot is missing or fails. The
// script goes down a pipe: the caller should ignore SIGPIPE (edgelm load does).
Status write_plot(const LoadResult& r, const std::string& png_path);

}  // namespace edgelm::loadgen
