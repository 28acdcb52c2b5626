/* `airlock seccomp-profile [--out FILE]` (airlock-server only): airlock's
 * seccomp policy (box/seccomp_policy.c) as the JSON profile the docker
 * driver sends with each container. It is also what a kubelet takes as a
 * Localhost profile: an operator installs this file on the sandbox nodes
 * (under /var/lib/kubelet/seccomp/, e.g. airlock/airlock.json) and sets
 * kubernetes_seccomp = localhost:airlock/airlock.json. The bytes are the
 * same on every run of the same build (the policy is compiled in). */
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../drivers/driver.h"
#include "cli.h"
#include "run_kube.h"

#define EXIT_AIRLOCK 125

static int usage(FILE *f) {
    fprintf(f, "usage: airlock seccomp-profile [--out FILE]\n"
               "Prints airlock's seccomp policy as the JSON profile the docker driver sends; install it on\n"
               "Kubernetes sandbox nodes as a Localhost profile (see docs/kubernetes.md). --out writes FILE\n"
               "(replaced whole, mode 0644) instead of stdout.\n");
    return f == stdout ? 0 : EXIT_AIRLOCK;
}

/* TEXT and a newline into PATH through a temporary beside it, renamed over
 * it: a node's kubelet never reads half a profile */
static int write_file(const char *path, const char *text) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid()) >= (int)sizeof tmp) {
        fprintf(stderr, "airlock seccomp-profile: --out %s: path too long\n", path);
        return EXIT_AIRLOCK;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        fprintf(stderr, "airlock seccomp-profile: %s: %s\n", tmp, strerror(errno));
        return EXIT_AIRLOCK;
    }
    size_t n = strlen(text);
    bool ok = fchmod(fd, 0644) == 0 && al_write_all(fd, text, n) == 0 && al_write_all(fd, "\n", 1) == 0 &&
              fsync(fd) == 0;
    int e = errno;
    if (close(fd) < 0 && ok) {
        ok = false;
        e = errno;
    }
    if (ok && rename(tmp, path) < 0) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        unlink(tmp);
        fprintf(stderr, "airlock seccomp-profile: --out %s: %s\n", path, strerror(e));
        return EXIT_AIRLOCK;
    }
    return 0;
}

int cli_seccomp_profile(int argc, char **argv) {
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return usage(stdout);
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc && argv[i + 1][0]) {
            out = argv[++i];
            continue;
        }
        fprintf(stderr, "airlock seccomp-profile: %s%s\n", argv[i],
                strcmp(argv[i], "--out") == 0 ? " needs a file" : ": unknown option");
        return usage(stderr);
    }
    al_error err = { 0 };
    _cleanup_free_ char *profile = al_driver_seccomp_profile(&err);
    if (!profile) {
        fprintf(stderr, "airlock seccomp-profile: %s\n", err.msg);
        return EXIT_AIRLOCK;
    }
    if (out)
        return write_file(out, profile);
    if (printf("%s\n", profile) < 0 || fflush(stdout) != 0) {
        perror("airlock seccomp-profile: stdout");
        return EXIT_AIRLOCK;
    }
    return 0;
}
