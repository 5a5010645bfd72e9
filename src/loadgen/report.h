// What a load run found: the summary as JSON (the --report file and the
// source of the printed text), one CSV row per request, and the text.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "loadgen/load.h"

namespace edgelm::loadgen {

// Counts by status, transport errors by kind, error codes, client-side drops;
// TTFT / TPOT / gaps between tokens / latency percentiles (ms) of the 200s,
// latency of the 429s;
// requests/s and tokens/s over the wall time; RSS peak, steady (median of the
// second half of the samples), after warm-up (the first sample once a 200 has
// completed) and the samples themselves. Missing figures are null.
nlohmann::json report_json(const LoadResult& r);

// A few lines for a terminal, from report_json's output.
std::string format_report(const nlohmann::json& report);

// start_s,status,error,transport,retry_after_s,ttft_ms,tpot_ms,latency_ms,
// tokens,chunks,max_gap_ms; one row per request in start order, empty
// fields for figures a request does not have.
std::string records_csv(const LoadResult& r);

// Writes `text` to `path`.
Status write_file(const std::string& path, const std::string& text);

}  // namespace edgelm::loadgen
