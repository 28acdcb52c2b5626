/* A box canceled cleanly (killed, its cgroup removed) by the signals that
 * would otherwise end the process that runs it, and leave the box. */
#include <signal.h>
#include <sys/signalfd.h>

#include "cancel_signals.h"

int al_cancel_signals(void) {
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    return signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
}
