#pragma once

#include <jansson.h>

#include "../box/box.h"

int cli_run(int argc, char **argv);
int cli_doctor(int argc, char **argv);

/* JSON of a run result, with text made valid UTF-8 (invalid bytes become U+FFFD). */
json_t *cli_result_json(const al_box_result *r, const al_runtime *rt);
json_t *cli_string(const char *s, size_t len);
/* Render bytes for a terminal: control characters and escapes made visible. */
void cli_write_safe(FILE *f, const char *buf, size_t len);
