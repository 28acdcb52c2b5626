/*
 * Fuzz target for PUT /v1/settings (src/core/settings.c): a workspace
 * admin's JSON body, applied over what the workspace set before. The input
 * is one or two bodies split at a 0xff byte (which no JSON text holds): the
 * second is applied over the first's result, as a later PUT would be.
 *
 * What must hold after every accepted PUT: the effective settings are sane
 * (al_settings_load would read them back, not refuse the workspace as
 * corrupt); the default network is a policy a run that names none could
 * run under; the DLP patterns compile together as a run's redactor; the
 * price is still the operator's; the same body applied again changes
 * nothing. Every refusal says why.
 */
#include <jansson.h>

#include "fuzz.h"
#include "core/dlp.h"
#include "core/settings.h"

static long n_applied, n_refused, n_network, n_dlp, n_twice;

static const al_settings_bounds bounds = { .driver = "native", .max_timeout_s = 3600, .per_person = 3,
                                           .max_memory_mb = 4096, .max_cpus = 2, .has_price = true, .price = 7 };

static json_t *effective(json_t *cur) {
    json_t *eff = al_settings_defaults(&bounds);
    json_object_update(eff, cur);
    json_object_set_new(eff, "price_per_run", json_integer(bounds.price));
    return eff;
}

static void check(json_t *cur, json_t *sec, json_t *body) {
    FUZZ_CHECK(!json_object_get(cur, "price_per_run"), "a workspace set its own price");
    json_t *eff = effective(cur);
    FUZZ_CHECK(al_settings_sane(eff), "accepted settings read back as corrupt");
    static al_net_policy np;
    al_error err = { 0 };
    const char *def = json_string_value(json_object_get(eff, "network"));
    FUZZ_CHECK(al_net_policy_parse(def, &np, &err) == 0 && al_settings_network_check(eff, &np, &err) == 0,
               "the default network %s is not one a run may use: %s", def, err.msg);
    n_network += np.mode != AL_NET_OFFLINE;
    al_dlp *d = NULL;
    FUZZ_CHECK(al_dlp_new(json_object_get(eff, "dlp_patterns"), &d, &err) == 0, "accepted DLP patterns do not build: %s",
               err.msg);
    n_dlp += json_array_size(json_object_get(eff, "dlp_patterns")) > 0;
    al_dlp_free(d);
    FUZZ_CHECK(json_object_size(sec) <= 32, "more secrets than allowed");
    /* the same PUT again is a no-op */
    json_t *c2 = json_deep_copy(cur), *s2 = json_deep_copy(sec), *b2 = json_deep_copy(body);
    al_error e2 = { 0 };
    FUZZ_CHECK(al_settings_apply(&bounds, c2, s2, b2, &e2) == 0, "the same body refused the second time: %s", e2.msg);
    FUZZ_CHECK(json_equal(c2, cur) && json_equal(s2, sec), "the same body applied twice changed the settings");
    n_twice++;
    json_decref(c2);
    json_decref(s2);
    json_decref(b2);
    json_decref(eff);
}

/* Apply one body; true when it was accepted (CUR and SEC then hold it). */
static bool put(json_t **cur, json_t **sec, const char *text, size_t len) {
    json_t *body = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    if (!body)
        return false;
    json_t *c = json_deep_copy(*cur), *s = json_deep_copy(*sec);
    al_error err = { 0 };
    bool ok = al_settings_apply(&bounds, c, s, body, &err) == 0;
    if (ok) {
        n_applied++;
        check(c, s, body);
        json_decref(*cur);
        json_decref(*sec);
        *cur = c;
        *sec = s;
    } else {
        n_refused++;
        FUZZ_CHECK(err.msg[0], "a refusal without a reason");
        json_decref(c);
        json_decref(s);
    }
    json_decref(body);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536)
        return 0;
    char *buf = fuzz_copy(data, size, 0);
    const char *cut = memchr(buf, 0xff, size);
    size_t l1 = cut ? (size_t)(cut - buf) : size;
    json_t *cur = json_object(), *sec = json_object();
    put(&cur, &sec, buf, l1);
    if (cut)
        put(&cur, &sec, cut + 1, size - l1 - 1);
    json_decref(cur);
    json_decref(sec);
    free(buf);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-settings: %ld bodies applied (%ld with a network, %ld with DLP patterns), %ld refused\n", n_applied,
           n_network, n_dlp, n_refused);
    return n_applied && n_network && n_dlp && n_refused && n_twice ? 0 : 1;
}
