/* airlock: run untrusted code in a sandbox that exists for one run. */
#include <string.h>

#include "cli.h"

static int usage(FILE *f) {
    fprintf(f, "usage: airlock COMMAND [ARGS]\n\n"
               "  run [OPTIONS] (FILE | -c CODE) [ARGS...]   run a script in a fresh sandbox\n"
               "  doctor [--json]                          what this host enforces, control by control\n"
               "  serve [--listen ADDR:PORT] [--state DIR] [--config FILE]   the execution service (docs/api.md)\n"
               "  admin [--state DIR] bootstrap|org|workspace|person|key|list  tenants and API keys\n"
               "  version                                  print the version\n\n"
               "see docs/cli.md\n");
    return f == stdout ? 0 : 125;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return usage(stderr);
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0)
        return cli_run(argc - 1, argv + 1);
    if (strcmp(cmd, "doctor") == 0)
        return cli_doctor(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0)
        return cli_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "admin") == 0)
        return cli_admin(argc - 1, argv + 1);
    if (strcmp(cmd, "helper") == 0)
        return cli_helper(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("airlock %s\n", AIRLOCK_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return usage(stdout);
    fprintf(stderr, "airlock: unknown command \"%s\"\n", cmd);
    return usage(stderr);
}
