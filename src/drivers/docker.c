/* The docker driver: each run is `airlock-server helper` (the helper of
 * the binary that links the Docker box), whose job names the daemon and the
 * runtime; the helper makes, runs and removes the run's container. The
 * service still never talks to Docker for a run, and never clones. */
#include <libgen.h>
#include <limits.h>
#include <string.h>

#include "../docker/docker.h"
#include "driver.h"

static struct {
    char socket[108];             /* "" for DOCKER_HOST / the default */
    al_docker_runtime runtime;
} conf;

int al_driver_docker_configure(const char *socket, const char *runtime, al_error *err) {
    al_docker_runtime rt = AL_DOCKER_RUNC;
    if (runtime && *runtime && al_docker_runtime_from_name(runtime, &rt) < 0)
        return al_err(err, "config", EINVAL, "runtime = %s: want runc or runsc", runtime);
    if (socket && strlen(socket) >= sizeof conf.socket)
        return al_err(err, "config", ENAMETOOLONG, "docker_socket is too long");
    snprintf(conf.socket, sizeof conf.socket, "%s", socket ? socket : "");
    conf.runtime = rt;
    return 0;
}

static const char *sock(void) { return conf.socket[0] ? conf.socket : NULL; }

static json_t *docker_capabilities(void) { return al_docker_capabilities(sock(), conf.runtime); }

static int docker_probe(al_error *err) {
    int r = al_docker_probe(sock(), conf.runtime, err);
    if (r < 0) {
        al_error e = *err;
        memset(err, 0, sizeof *err);
        return al_err(err, "driver", -r, "docker driver: %s", e.msg);
    }
    memset(err, 0, sizeof *err);
    return 0;
}

static int docker_start(const char *self_exe, const char *job, al_driver_run *ret, al_error *err) {
    json_t *j = json_loads(job, 0, NULL);
    if (!j)
        return al_err(err, "driver", EINVAL, "the job is not JSON");
    json_object_set_new(j, "driver", json_string("docker"));
    json_object_set_new(j, "docker_runtime", json_string(al_docker_runtime_name(conf.runtime)));
    if (conf.socket[0])
        json_object_set_new(j, "docker_socket", json_string(conf.socket));
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text)
        return -ENOMEM;
    /* the helper of airlock-server, beside SELF_EXE */
    char copy[PATH_MAX], exe[PATH_MAX + 32];
    snprintf(copy, sizeof copy, "%s", self_exe);
    snprintf(exe, sizeof exe, "%s/airlock-server", dirname(copy));
    int r = al_driver_helper_start(exe, text, ret, err);
    free(text);
    return r;
}

static void docker_sweep(void) {
    al_box_sweep_stale();
    al_docker_sweep(sock());
}

const al_driver_ops al_driver_docker = {
    .name = "docker",
    .capabilities = docker_capabilities,
    .probe = docker_probe,
    .start = docker_start,
    .cancel = al_driver_helper_cancel,
    .wait = al_driver_helper_wait,
    .sweep = docker_sweep,
    .needs_image = true,
};
