/* Base64 (RFC 4648, with padding) for Secrets' data and kubeconfigs'
 * *-data fields. */
#pragma once

#include <stddef.h>

/* LEN bytes at DATA as NUL-terminated base64 (malloc'd; NULL: out of memory). */
char *al_kube_b64_encode(const void *data, size_t len);
/* S (base64; whitespace between groups ignored, as kubectl's decoder
 * does not mind line breaks) into a malloc'd NUL-terminated buffer of
 * *RET_LEN bytes: NULL when S is not base64 or memory is out. */
char *al_kube_b64_decode(const char *s, size_t *ret_len);
