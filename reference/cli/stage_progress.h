// stage_progress.h — "perplexity: windows 3/8  1.2 s  (ETA 2 s)" on stderr while a long command
// works.
//
// Part of the CLI (Lab 10: `servelab quantize` and `servelab perplexity`). On
// a terminal the line is redrawn in place after every step; in a log (stderr
// not a terminal) only the line that finishes a stage is written, so a CI log
// gets one line per stage instead of thousands of carriage returns. stdout
// is never touched: it carries the command's result (or its --json).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace servelab::cli {

class StageProgress {
  public:
    // `command` prefixes every line ("quantize", "perplexity"); a disabled
    // progress (--quiet, or a log level above info) writes nothing.
    StageProgress(std::string_view command, bool enabled);
    // `done` of `total` steps of `stage` are finished. A new stage name
    // restarts the clock its elapsed time and ETA are measured from.
    void update(std::string_view stage, int64_t done, int64_t total);

  private:
    std::string command_;
    bool enabled_;
    bool tty_;  // stderr is a terminal: redraw with '\r'
    std::string stage_;
    std::chrono::steady_clock::time_point stage_start_;
};

}  // namespace servelab::cli
