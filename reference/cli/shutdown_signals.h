// shutdown_signals.h — the signals that stop `servelab serve` and `servelab route` gracefully.
//
// Part of the CLI (chapter 11.7, serving). SIGTERM, SIGINT (Ctrl-C) and
// SIGHUP (the terminal closed: drain too, never die mid-stream) are blocked
// in the calling thread and so in every thread it starts afterwards; they
// then reach only the thread that sigwait()s for them, and the shutdown
// runs as ordinary code instead of in a handler that interrupted whichever
// thread the signal hit. Call it before any thread starts.
#pragma once

#include <signal.h>

namespace servelab::cli {

// Blocks the shutdown signals here (and in threads started later); returns
// the set to sigwait() on.
sigset_t block_shutdown_signals();

}  // namespace servelab::cli
