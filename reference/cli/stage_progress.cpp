// stage_progress.cpp — see stage_progress.h.
#include "reference/cli/stage_progress.h"

#include <unistd.h>

#include <cstdio>

namespace servelab::cli {

StageProgress::StageProgress(std::string_view command, bool enabled)
    : command_(command), enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1) {}

void StageProgress::update(std::string_view stage, int64_t done, int64_t total) {
    if (!enabled_) return;
    if (stage != stage_) {
        stage_ = std::string(stage);
        stage_start_ = std::chrono::steady_clock::now();
    }
    const bool last = done == total;
    if (!tty_ && !last) return;
    const double elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_start_).count();
    // The steps so far predict the rest: windows of one size take alike.
    const double eta_s = done > 0 ? elapsed_s * double(total - done) / double(done) : 0.0;
    std::fprintf(stderr, "%s%s: %s %lld/%lld  %.1f s  (ETA %.0f s)%s", tty_ ? "\r" : "",
                 command_.c_str(), stage_.c_str(), (long long)done, (long long)total, elapsed_s,
                 eta_s, last ? "\n" : "");
    std::fflush(stderr);
}

}  // namespace servelab::cli
