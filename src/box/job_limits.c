/* A helper job's "limits" object (src/cli/helper.c says its fields) as the
 * box's limits: read the same way by the helper that runs the job and by
 * the docker driver that makes its container ahead of need, so the two
 * agree on what the container was made for. */
#include <jansson.h>

#include "box.h"

static uint64_t get_u64(json_t *o, const char *k, uint64_t def) {
    json_t *v = json_object_get(o, k);
    if (json_is_integer(v) && json_integer_value(v) >= 0)
        return (uint64_t)json_integer_value(v);
    return def;
}

void al_box_limits_from_job(json_t *l, al_box_limits *ret) {
    al_box_limits_default(ret);
    ret->wall_ms = get_u64(l, "timeout_s", ret->wall_ms / 1000) * 1000;
    ret->memory_bytes = get_u64(l, "memory_bytes", ret->memory_bytes);
    ret->cpu_millis = get_u64(l, "cpu_millis", ret->cpu_millis);
    ret->pids = get_u64(l, "pids", ret->pids);
    ret->output_bytes = get_u64(l, "output_bytes", ret->output_bytes);
    ret->tmpfs_bytes = get_u64(l, "tmpfs_bytes", ret->tmpfs_bytes);
}
