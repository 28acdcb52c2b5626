/* Base64 (b64.h). */
#include "b64.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char table[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *al_kube_b64_encode(const void *data, size_t len) {
    const unsigned char *s = data;
    char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    size_t i = 0;
    for (; i + 2 < len; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *o++ = table[v >> 18];
        *o++ = table[(v >> 12) & 63];
        *o++ = table[(v >> 6) & 63];
        *o++ = table[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < len ? (uint32_t)s[i + 1] << 8 : 0);
        *o++ = table[v >> 18];
        *o++ = table[(v >> 12) & 63];
        *o++ = i + 1 < len ? table[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o = '\0';
    return out;
}

char *al_kube_b64_decode(const char *s, size_t *ret_len) {
    size_t n = strlen(s);
    unsigned char *out = malloc(n / 4 * 3 + 4), *o = out;
    if (!out)
        return NULL;
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            continue;
        if (c == '=') {
            pad++;
            continue;
        }
        const char *p = pad ? NULL : memchr(table, c, 64);
        if (!p || !c) {
            free(out);
            return NULL;
        }
        acc = acc << 6 | (uint32_t)(p - table);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            *o++ = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    /* 6 or more bits left over, or more than two pads: not base64 */
    if (bits >= 6 || pad > 2) {
        free(out);
        return NULL;
    }
    *o = '\0';
    *ret_len = (size_t)(o - out);
    return (char *)out;
}
