/* The answer of GET /healthz (health.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"

typedef struct al_service al_service;

/* The body of GET /healthz (malloc'd JSON): the driver's probe, run at most
 * every HEALTH_PROBE_S and never two at once; NULL on no memory. */
#define AL_HEALTH_PROBE_S 30
char *al_service_health(al_service *s);
