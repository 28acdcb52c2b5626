/* The disabled driver: code execution is switched off; every run is
 * refused with a clear reason, never started and left broken. */
#include <string.h>

#include "driver.h"

static json_t *disabled_capabilities(void) {
    return json_pack("{s:{s:s, s:s}}", "execution", "level", "not-enforced", "detail",
                     "code execution is disabled on this service");
}

static int disabled_probe(al_error *err) {
    return al_err(err, "driver", ENOTSUP, "code execution is disabled on this service (driver = disabled)");
}

static int disabled_start(const char *self_exe, const al_job *job, al_driver_run *ret, al_error *err) {
    return disabled_probe(err);
}

static int disabled_cancel(al_driver_run *r) { return 0; }
static int disabled_wait(al_driver_run *r) { return 0; }
static void disabled_sweep(void) {}

const al_driver_ops al_driver_disabled = {
    .name = "disabled",
    .capabilities = disabled_capabilities,
    .probe = disabled_probe,
    .start = disabled_start,
    .cancel = disabled_cancel,
    .wait = disabled_wait,
    .sweep = disabled_sweep,
};

const al_driver_ops *al_driver_by_name(const char *name) {
    if (strcmp(name, "native") == 0)
        return &al_driver_native;
    if (strcmp(name, "docker") == 0)
        return &al_driver_docker;
    if (strcmp(name, "disabled") == 0)
        return &al_driver_disabled;
    if (strcmp(name, "e2b") == 0)
        return &al_driver_e2b;
    if (strcmp(name, "daytona") == 0)
        return &al_driver_daytona;
    if (strcmp(name, "kubernetes") == 0)
        return &al_driver_kubernetes;
    return NULL;
}
