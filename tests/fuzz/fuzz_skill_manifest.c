/*
 * Fuzz target for a skill's manifest, skill.json (src/core/skill_manifest.c):
 * the manifest and its input schemas, then the schema's own examples checked
 * as arguments against them, as a call to the skill would be.
 *
 * What must hold: a manifest that parses has a valid name, and every
 * entrypoint a script with a valid path that al_skill_entrypoint finds by
 * name; an argument check answers yes, or no with a reason; every refusal
 * says why.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "core/skills.h"

static long n_manifest, n_args_ok, n_args_bad, n_refused;

static void try_manifest(const uint8_t *data, size_t size) {
    json_t *m = NULL;
    al_error err = { 0 };
    if (al_skill_manifest_parse((const char *)data, size, &m, &err) < 0) {
        FUZZ_CHECK(err.msg[0], "a refused manifest without a reason");
        n_refused++;
        return;
    }
    n_manifest++;
    if (!al_skill_name_valid(json_string_value(json_object_get(m, "name"))))
        abort();
    size_t i;
    json_t *ep;
    json_array_foreach(json_object_get(m, "entrypoints"), i, ep) {
        al_error e2 = { 0 };
        if (al_skill_path_check(json_string_value(json_object_get(ep, "script")), NULL, &e2) < 0)
            abort();
        if (al_skill_entrypoint(m, json_string_value(json_object_get(ep, "name"))) == NULL)
            abort();
        /* the schema's own examples (and defaults) as arguments: any answer, no crash */
        json_t *sc = json_object_get(ep, "input_schema");
        json_t *ex = json_object_get(sc, "examples");
        size_t k;
        json_t *a;
        json_array_foreach(ex, k, a) {
            al_error e3 = { 0 };
            if (al_skill_args_validate(sc, a, &e3) == 0)
                n_args_ok++;
            else {
                FUZZ_CHECK(e3.msg[0], "refused arguments without a reason");
                n_args_bad++;
            }
        }
    }
    json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20))
        return 0;
    char *buf = fuzz_copy(data, size, 0);
    try_manifest((const uint8_t *)buf, size);
    free(buf);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-skill-manifest: %ld manifests valid (%ld argument sets valid, %ld refused), %ld refused\n",
           n_manifest, n_args_ok, n_args_bad, n_refused);
    return n_manifest && n_args_ok && n_args_bad && n_refused ? 0 : 1;
}
