// shutdown_signals.cpp — see shutdown_signals.h.
#include "reference/cli/shutdown_signals.h"

#include <pthread.h>

namespace servelab::cli {

sigset_t block_shutdown_signals() {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    return signals;
}

}  // namespace servelab::cli
