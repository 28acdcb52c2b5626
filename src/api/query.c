/* Strict query parameters (query.h). */
#include "query.h"

#include <microhttpd.h>
#include <stdio.h>
#include <string.h>

typedef struct scan {
    const char *const *allowed;
    size_t n;
    char bad[65];
    bool found;
} scan;

static enum MHD_Result look(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    scan *sc = cls;
    (void)kind;
    (void)value;
    for (size_t i = 0; key && i < sc->n; i++)
        if (strcmp(key, sc->allowed[i]) == 0)
            return MHD_YES;
    snprintf(sc->bad, sizeof sc->bad, "%s", key ? key : "");
    sc->found = true;
    return MHD_NO; /* the first is enough */
}

bool al_query_check(struct MHD_Connection *c, const char *const *allowed, size_t n, char *msg, size_t msglen) {
    scan sc = { .allowed = allowed, .n = n };
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, look, &sc);
    if (!sc.found)
        return true;
    int o = snprintf(msg, msglen, "unknown query parameter \"%s\" (this route takes: ", sc.bad);
    for (size_t i = 0; i < n && o >= 0 && (size_t)o < msglen; i++)
        o += snprintf(msg + o, msglen - (size_t)o, "%s%s", i ? ", " : "", allowed[i]);
    if (o >= 0 && (size_t)o < msglen)
        snprintf(msg + o, msglen - (size_t)o, n ? ")" : "none)");
    return false;
}
