/* A box's result as JSON (box_result.c). */
#pragma once

#include <jansson.h>

#include "../box/box.h"

/* JSON of a run result, with text made valid UTF-8 (invalid bytes become U+FFFD). */
json_t *al_box_result_json(const al_box_result *r, const al_runtime *rt);
/* S[0..LEN) as a JSON string, valid UTF-8 (invalid bytes become U+FFFD). */
json_t *al_box_result_text(const char *s, size_t len);
/* S[0..LEN) in base64, exactly. */
json_t *al_box_result_base64(const char *s, size_t len);
