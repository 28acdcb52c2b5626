/* The Idempotency-Key header of a creating request (docs/api.md
 * "Idempotent requests"), read off the wire and bound with the core's
 * al_idem_init (src/core/idempotency.c). */
#include <microhttpd.h>
#include <string.h>
#include <strings.h>

#include "../core/service.h"
#include "http.h"

typedef struct header_count {
    const char *name;
    unsigned n;
} header_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    header_count *h = cls;
    if (key && strcasecmp(key, h->name) == 0)
        h->n++;
    return MHD_YES;
}

int al_idem_from_request(struct MHD_Connection *c, const char *scope, json_t *json, const void *raw, size_t len,
                         al_idem *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    /* two keys would be two answers to one question */
    header_count h = { .name = "Idempotency-Key" };
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &h);
    if (h.n > 1)
        return al_err(err, "idempotency", EINVAL, "send one Idempotency-Key header, not %u", h.n);
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key");
    return json ? al_idem_init_json(ret, key, scope, json, err) : al_idem_init(ret, key, scope, raw, len, err);
}

