/* The docker driver's containers made ahead of need (docker_pool.c): each
 * handed to one run, then removed. Inside src/drivers only. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "../docker/docker.h"

/* The daemon, the runtime, and how many containers to keep per shape of
 * run (0: none, the default before this is called). */
void al_docker_pool_configure(const char *socket, al_docker_runtime runtime, int size);
/* A container made for runs of IMAGE_DIR's image DIGEST with limits L into
 * *RET (true), or none ready (false: the run makes its own). Either way
 * the pool learns that such runs are wanted, and makes some. */
bool al_docker_pool_take(const char *image_dir, const char *digest, const al_box_limits *l, al_docker_held *ret);
/* H is now the run of helper PID's: removed once al_docker_pool_run_ended(PID). */
void al_docker_pool_lend(pid_t pid, al_docker_held *h);
/* A cold run's uids (H: their locks, its container's name as its id),
 * which the service holds for helper PID: after al_docker_pool_run_ended
 * (PID) its container is removed if its helper left it (killed outright,
 * it could not), and only then are the uids let go, so that no other box
 * takes a uid a container of it may still run as. */
void al_docker_pool_keep_uids(pid_t pid, al_docker_held *h);
/* H was taken but not used: removed. */
void al_docker_pool_give_back(al_docker_held *h);
void al_docker_pool_run_ended(pid_t pid);
/* {per_shape, idle_s, idle, in_use, removing, cold_removing (cold runs'
 * containers not removed yet, which keep their uids), hits, misses (since the
 * start), shapes: [{image, limits..., idle, hits, misses}]} */
json_t *al_docker_pool_json(void);
/* Remove every container it holds and stop its thread (the service's runs
 * have ended). */
void al_docker_pool_stop(void);
