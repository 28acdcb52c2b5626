/* Small conversions of the store's text (text.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"

typedef struct al_service al_service;

/* JSON TEXT (a document column of a record), parsed (json null when NULL or bad). */
json_t *al_json_text(const char *text);
void al_rfc3339_after(int64_t secs, char *buf, size_t len);
bool al_rfc3339_valid(const char *t);
/* RFC 3339 text (the store's) of now plus MS (may be negative). */
void al_cluster_time_after(int64_t ms, char *buf, size_t len);
