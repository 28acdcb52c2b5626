/* The core's outcomes (core/status.h) as HTTP statuses: the one mapping
 * that REST, Piston and MCP's transport answer with. */
#pragma once

#include "../core/status.h"

/* The HTTP status of ST (500 for a value outside the set). */
unsigned al_status_http(al_status st);
