/* Strict field validation (json_keys.h). */
#include "json_keys.h"

#include <stdio.h>
#include <string.h>

const char *al_json_unknown_key(json_t *obj, const char *const *allowed, size_t n) {
    const char *k;
    json_t *v;
    if (!json_is_object(obj))
        return NULL;
    json_object_foreach(obj, k, v) {
        bool known = false;
        for (size_t i = 0; i < n && !known; i++)
            known = strcmp(k, allowed[i]) == 0;
        if (!known)
            return k;
    }
    return NULL;
}

bool al_json_keys_check(json_t *obj, const char *where, const char *const *allowed, size_t n, char *msg,
                        size_t msglen) {
    const char *bad = al_json_unknown_key(obj, allowed, n);
    if (!bad)
        return true;
    if (!msg || msglen == 0)
        return false;
    if (n == 0) {
        snprintf(msg, msglen, "unknown field \"%.64s\" in %s (it takes none)", bad, where);
        return false;
    }
    int o = snprintf(msg, msglen, "unknown field \"%.64s\" in %s (it takes: ", bad, where);
    for (size_t i = 0; i < n && o >= 0 && (size_t)o < msglen; i++)
        o += snprintf(msg + o, msglen - (size_t)o, "%s%s", i ? ", " : "", allowed[i]);
    if (o >= 0 && (size_t)o < msglen)
        snprintf(msg + o, msglen - (size_t)o, ")");
    return false;
}
