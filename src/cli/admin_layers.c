/*
 * `airlock admin layers ls|prune`: the package layer store (issue 38) as
 * an operator sees it. The service collects on its own (retention.c:
 * package_layer_retention_days, package_layers_max_mb); prune is the same
 * collection now, with an age of the operator's choosing. A layer a run
 * is using is never removed (its lock is held shared); a removed layer a
 * thread still names is installed again at that thread's next run.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../drivers/install.h"
#include "cli.h"

static void said(void *ud, const al_layer_info *li, const char *why) {
    (void)ud;
    printf("removed sha256:%s %llu bytes (%s)\n", li->key, (unsigned long long)li->bytes, why);
}

int cli_admin_layers(const char *state, const al_layer_limits *lim, int argc, char **argv) {
    char layers[PATH_MAX];
    snprintf(layers, sizeof layers, "%s/layers", state);
    al_error err = { 0 };
    time_t now = time(NULL);
    if (argc == 1 && strcmp(argv[0], "ls") == 0) {
        al_layer_info *v = NULL;
        size_t n = 0;
        if (al_install_layers_list(layers, &v, &n, &err) < 0) {
            fprintf(stderr, "airlock admin: %s\n", err.msg);
            return 125;
        }
        uint64_t total = 0;
        /* least recently used first: the order a full store loses them in */
        for (size_t k = 0; k < n; k++) {
            char when[32];
            struct tm tm;
            time_t t = (time_t)v[k].used;
            strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
            printf("sha256:%s %12llu bytes  last used %s (%lld days ago)\n", v[k].key,
                   (unsigned long long)v[k].bytes, when, (long long)((now - t) / 86400));
            total += v[k].bytes;
        }
        printf("%zu layers, %llu bytes (bound %llu bytes, unused layers go after %d days)\n", n,
               (unsigned long long)total, (unsigned long long)lim->max_bytes, lim->retention_days);
        free(v);
        return 0;
    }
    if (argc >= 1 && strcmp(argv[0], "prune") == 0 && (argc == 1 || argc == 3) &&
        (argc == 1 || strcmp(argv[1], "--older-than") == 0)) {
        int64_t days = lim->retention_days;
        if (argc == 3) {
            char *end = NULL;
            errno = 0;
            long long d = strtoll(argv[2], &end, 10);
            if (errno || !end || *end || end == argv[2] || d < 0 || d > 36500) {
                fprintf(stderr, "airlock admin: layers prune --older-than %s: want a number of days from 0 to 36500\n",
                        argv[2]);
                return 125;
            }
            days = d;
        }
        /* older than DAYS: 0 is every layer not in use */
        int r = al_install_layers_collect(layers, (int64_t)now, days * 86400, lim->max_bytes, said,
                                          NULL, &err);
        if (r < 0) {
            fprintf(stderr, "airlock admin: %s\n", err.msg);
            return 125;
        }
        printf("%d layers removed\n", r);
        return 0;
    }
    fprintf(stderr, "usage: airlock admin layers ls | prune [--older-than DAYS]\n");
    return 125;
}
