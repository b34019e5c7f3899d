// machine_info.h — what a benchmark report says about where it ran.
//
// Part of the CLI (all labs): every figure in docs/perf.md names the CPU, the
// thread count and the date, so benchmark JSON carries them.
#pragma once

#include <string>

namespace servelab::cli {

std::string cpu_model_name();  // /proc/cpuinfo's "model name", or "unknown"
std::string utc_date();        // YYYY-MM-DD

}  // namespace servelab::cli
