/* `airlock serve`: configuration from defaults, then a config file, then
 * the environment, then flags (each overriding the one before). */
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "../api/http.h"
#include "../box/cgroup.h"
#include "../core/service.h"
#include "cli.h"

/* A stop drains: no run is taken from the queue (queued ones wait for the
 * next start or another node), running ones have stop_grace_s to finish
 * while HTTP still answers (their followers see them end), and a second
 * signal ends the wait at once. What is left is ended by al_service_stop. */
static void drain(al_service *s, const al_service_config *cfg, const sigset_t *sigs, int sig) {
    al_service_drain(s);
    int running = al_service_running_count(s);
    al_service_log(s, AL_LOG_INFO, "service.stop", json_pack("{s:i, s:i, s:i}", "signal", sig, "running", running, "grace_s",
                                                cfg->stop_grace_s));
    uint64_t deadline = al_now_ms() + (uint64_t)cfg->stop_grace_s * 1000;
    while ((running = al_service_running_count(s)) > 0 && al_now_ms() < deadline) {
        struct timespec step = { .tv_nsec = 100 * 1000 * 1000 };
        int again = sigtimedwait(sigs, NULL, &step);
        if (again > 0) {
            al_service_log(s, AL_LOG_WARN, "service.stop_now", json_pack("{s:i, s:i}", "signal", again, "running", running));
            break;
        }
    }
    if (running > 0)
        al_service_log(s, AL_LOG_WARN, "service.drain_ended", json_pack("{s:i, s:s}", "running", running, "then",
                                                           "ended by the stop: error service_stopped, refunded"));
}

/* Open the service, answer HTTP until SIGTERM, SIGINT or SIGHUP, then
 * drain, stop HTTP and close the service. */
static int serve(const al_service_config *cfg, al_error *err) {
    /* Block the signals we wait for before any thread starts, so every
     * thread inherits the mask and only sigwait below sees them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* first, before any helper starts: a unit's own cgroup (Delegate=yes)
     * is made ready for the boxes' (AIRLOCK_CGROUP_PARENT=self) */
    int r = al_cgroup_adopt_own(err);
    if (r < 0)
        return r;
    al_service *s = NULL;
    r = al_service_open(cfg, &s, err);
    if (r < 0)
        return r;
    al_http *http = NULL;
    if ((r = al_http_start(s, &http, err)) < 0)
        return r;
    al_service_log_started(s);

    int sig = 0;
    sigwait(&sigs, &sig);
    drain(s, cfg, &sigs, sig);
    al_service_stop(s);
    al_http_stop(http);
    return al_service_close(s, err);
}

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
        { "AIRLOCK_STORE", "store" }, { "AIRLOCK_RUNTIME", "runtime" },
        /* the CLI's variable, so `airlock smoke` and `airlock serve` find one
         * cluster alike; KUBECONFIG is not read: a service's cluster is named */
        { "AIRLOCK_KUBECONFIG", "kubeconfig" },
    };
    for (size_t i = 0; i < ELEMENTSOF(envs); i++) {
        const char *v = getenv(envs[i].env);
        if (v && al_service_config_set(&cfg, envs[i].key, v, &err) < 0)
            goto fail;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("usage: airlock serve [--listen ADDR:PORT] [--state DIR] [--config FILE]\n"
                   "                     [--driver native|docker|e2b|daytona|kubernetes|disabled] [--runtime runc|runsc] [--docker_socket PATH]\n"
                   "                     [--kubeconfig PATH] [--kubernetes_namespace NS] [--kubernetes_registry REPO]\n"
                   "                     [--kubernetes_runtime_class RC] [--kubernetes_seccomp runtime-default|localhost:PATH]\n"
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
    if (serve(&cfg, &err) < 0)
        goto fail;
    return 0;
fail:
    fprintf(stderr, "airlock serve: %s\n", err.msg);
    return 125;
}
