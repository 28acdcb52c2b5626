/* The runs this node holds (active.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"

typedef struct al_service al_service;

/* Whether this node's runner holds RUN_ID. */
bool al_service_is_active(al_service *s, const char *run_id);
/* Cancel RUN_ID if this node runs its box: whether it does. */
bool al_service_cancel_local(al_service *s, const char *run_id);
/* Kill every box this node runs (a fenced node): airlock's own stop, so
 * what it ends is never reported as canceled. */
void al_service_cancel_all(al_service *s);
