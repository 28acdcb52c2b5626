/* `airlock serve`: configuration from defaults, then a config file, then
 * the environment, then flags (each overriding the one before). */
#include <string.h>

#include "../core/service.h"
#include "cli.h"

int cli_serve(int argc, char **argv) {
    al_service_config cfg;
    al_service_config_default(&cfg);
    al_error err = { 0 };
    const char *config = getenv("AIRLOCK_CONFIG");
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            config = argv[i + 1];
    if (config && al_service_config_load(&cfg, config, &err) < 0)
        goto fail;
    static const struct { const char *env, *key; } envs[] = {
        { "AIRLOCK_LISTEN", "listen" }, { "AIRLOCK_STATE", "state" }, { "AIRLOCK_DRIVER", "driver" },
        { "AIRLOCK_STORE", "store" },
    };
    for (size_t i = 0; i < ELEMENTSOF(envs); i++) {
        const char *v = getenv(envs[i].env);
        if (v && al_service_config_set(&cfg, envs[i].key, v, &err) < 0)
            goto fail;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("usage: airlock serve [--listen ADDR:PORT] [--state DIR] [--config FILE] [--driver native|disabled]\n"
                   "                     [--store sqlite|postgresql://USER@HOST/DB]\n"
                   "see docs/api.md\n");
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "airlock serve: %s needs a value\n", a);
            return 125;
        }
        const char *v = argv[++i];
        if (strcmp(a, "--config") == 0)
            continue;
        if (strncmp(a, "--", 2) != 0 || al_service_config_set(&cfg, a + 2, v, &err) < 0) {
            if (!err.msg[0])
                snprintf(err.msg, sizeof err.msg, "unknown option %s", a);
            goto fail;
        }
    }
    if (al_service_run(&cfg, &err) < 0)
        goto fail;
    return 0;
fail:
    fprintf(stderr, "airlock serve: %s\n", err.msg);
    return 125;
}
