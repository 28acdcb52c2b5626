/* The native driver's warm boxes (warm_pool.c): a helper per box, made and
 * started ahead of need, handed to one run. Inside src/drivers only. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "../box/box.h"
#include "driver.h"

/* How many warm boxes to keep at most per shape of run (0: none), the
 * memory all of them may hold, the modules their interpreters import
 * ahead (comma-separated), and whether Python's without them are forked
 * by a zygote (box.h). */
void al_warm_pool_configure(int size, uint64_t budget_bytes, const char *preload, bool fork);
/* A warm helper for JOB's run, handed that job (true: *RET is now the
 * run's helper), or none (false: the run goes cold). Either way the pool
 * learns that such runs are wanted, and makes some (SELF_EXE's helpers). */
bool al_warm_pool_take(const char *self_exe, const al_job *job, al_driver_run *ret);
/* {per_shape, idle_s, preload, idle, starting, memory_bytes,
 *  memory_budget_bytes, hits, misses, shapes: [...]} */
json_t *al_warm_pool_json(void);
/* Every warm helper ends (the service's runs have ended). */
void al_warm_pool_stop(void);
