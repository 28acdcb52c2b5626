/* Inside the core: a run's job (drivers/job.h), built for its driver. */
#pragma once

#include <jansson.h>

#include "../drivers/job.h"
#include "service.h"

/* RUN's job into RET (the caller frees it with al_job_free, also on
 * failure), its inputs staged under DIR (in/, documents/, out/, stdin):
 * the paths, the limits, the network policy, the image resolved again,
 * the skill's bundle. The thread's documents that could not be staged are
 * listed in *RET_DOCS_SKIPPED (a JSON array, the result's, the caller's):
 * the run starts without them. */
int al_run_job_build(al_service *s, const al_store_run *run, const char *dir, al_job *ret, json_t **ret_docs_skipped,
                     al_error *err);
