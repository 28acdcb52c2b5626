/* airlock: run untrusted code in a sandbox that exists for one run.
 *
 * Two binaries: `airlock` (run, doctor, helper: the box and nothing else,
 * so a box starts without loading HTTP, TLS and SQLite libraries) and
 * `airlock-server` beside it (serve, admin), which `airlock serve` and
 * `airlock admin` and `airlock mcp` hand over to. */
#include <libgen.h>
#include <limits.h>
#include <string.h>

#include "cli.h"
#ifdef AIRLOCK_SERVER
#include "run_kube.h"
#endif

#ifndef AIRLOCK_SERVER
/* exec the sibling airlock-server with the same arguments */
static int hand_over(char **argv) {
    char self[PATH_MAX], path[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) {
        perror("airlock: readlink /proc/self/exe");
        return 125;
    }
    self[n] = '\0';
    snprintf(path, sizeof path, "%s/airlock-server", dirname(self));
    execv(path, argv);
    fprintf(stderr, "airlock: cannot run %s: %s (it is installed beside airlock)\n", path, strerror(errno));
    return 125;
}
#endif

#ifndef AIRLOCK_SERVER
/* Whether this is `airlock image [--state DIR] import|export ...`: airlock-server's,
 * which links libarchive for it (the lean binary loads faster without). */
static bool image_import(int argc, char **argv) {
    int i = 2;
    while (i + 1 < argc && (strcmp(argv[i], "--state") == 0 || strcmp(argv[i], "--images") == 0))
        i += 2;
    return i < argc && (strcmp(argv[i], "import") == 0 || strcmp(argv[i], "export") == 0);
}

/* Whether `airlock run`'s options (before its script) name a driver that
 * lives in airlock-server (docker: libcurl, which a native box never
 * loads). */
static bool run_needs_server(int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0 || strcmp(a, "-c") == 0 || a[0] != '-' || a[1] == '\0')
            return false;
        if (strcmp(a, "--json") == 0 || strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 ||
            strcmp(a, "--fork") == 0 || strcmp(a, "--dry-run") == 0)
            continue;
        if (i + 1 < argc && strcmp(a, "--driver") == 0 && strcmp(argv[i + 1], "native") != 0)
            return true;
        i++;
    }
    return false;
}

/* Whether OPT is among ARGV's options (`airlock doctor --url`: the
 * service's view, over libcurl). */
static bool has_option(int argc, char **argv, const char *opt) {
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], opt) == 0)
            return true;
    return false;
}
#endif

bool cli_help_asked(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return true;
    return false;
}

static int usage(FILE *f) {
    fprintf(f, "usage: airlock COMMAND [ARGS]\n\n"
               "  run [OPTIONS] (FILE | -c CODE) [ARGS...]   run a script in a fresh sandbox\n"
               "  doctor [--json] [--url URL]              what this host (or a service) enforces, control by control\n"
               "  image build|ls|verify|rm                 runtime images (airlock image for help)\n"
               "  serve [--listen ADDR:PORT] [--state DIR] [--config FILE]   the execution service (docs/api.md)\n"
               "  admin [--state DIR] bootstrap|org|workspace|person|key|list  tenants and API keys\n"
               "  mcp [--url URL] [--key KEY] | --local    MCP over stdio, to a service or a private one (docs/cli.md)\n"
               "  smoke --driver kubernetes [--kubeconfig PATH] ...   whether the cluster enforces the sandbox pods' NetworkPolicy\n"
               "  seccomp-profile [--out FILE]             airlock's seccomp policy as a Docker/Kubernetes Localhost profile\n"
               "  version                                  print the version\n\n"
               "see docs/cli.md\n");
    return f == stdout ? 0 : 125;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return usage(stderr);
    const char *cmd = argv[1];
#ifndef AIRLOCK_SERVER
    if (strcmp(cmd, "run") == 0 && run_needs_server(argc, argv))
        return hand_over(argv);
    if (strcmp(cmd, "doctor") == 0 && (run_needs_server(argc, argv) || has_option(argc, argv, "--url")))
        return hand_over(argv);
    if (strcmp(cmd, "image") == 0 && image_import(argc, argv))
        return hand_over(argv);
#endif
    if (strcmp(cmd, "run") == 0)
        return cli_run(argc - 1, argv + 1);
    if (strcmp(cmd, "doctor") == 0)
        return cli_doctor(argc - 1, argv + 1);
#ifdef AIRLOCK_SERVER
    if (strcmp(cmd, "serve") == 0)
        return cli_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "admin") == 0)
        return cli_admin(argc - 1, argv + 1);
    if (strcmp(cmd, "mcp") == 0)
        return cli_mcp(argc - 1, argv + 1);
    if (strcmp(cmd, "smoke") == 0)
        return cli_smoke(argc - 1, argv + 1);
    if (strcmp(cmd, "seccomp-profile") == 0)
        return cli_seccomp_profile(argc - 1, argv + 1);
#else
    if (strcmp(cmd, "serve") == 0 || strcmp(cmd, "admin") == 0 || strcmp(cmd, "mcp") == 0 ||
        strcmp(cmd, "smoke") == 0 || strcmp(cmd, "seccomp-profile") == 0)
        return hand_over(argv);
#endif
    if (strcmp(cmd, "image") == 0)
        return cli_image(argc - 1, argv + 1);
    if (strcmp(cmd, "helper") == 0)
        return cli_helper(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        if (argc > 2) {
            fprintf(stderr, "airlock: version takes no arguments (\"%s\")\n", argv[2]);
            return 125;
        }
        printf("airlock %s\n", AIRLOCK_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return usage(stdout);
    fprintf(stderr, "airlock: unknown command \"%s\"\n", cmd);
    return usage(stderr);
}
