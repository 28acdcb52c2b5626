#pragma once

#include <nettle/sha2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* N bytes D as 2N lower-case hex digits and a NUL in OUT. */
void al_hex(const uint8_t *d, size_t n, char *out);
/* 2N lower-case hex digits S as N bytes in OUT: false when S is not that. */
bool al_unhex(const char *s, uint8_t *out, size_t n);
/* The digest of C, as hex. */
void al_sha256_finish_hex(struct sha256_ctx *c, char out[65]);
/* The sha256 of LEN bytes DATA, as hex. */
void al_sha256_hex(const void *data, size_t len, char out[65]);
/* The sha256 of what FD holds from its offset to its end, as hex, and how
 * many bytes that was (RET_SIZE may be NULL); -errno on a read error. */
int al_sha256_fd(int fd, char out[65], uint64_t *ret_size);
/* S is 64 lower-case hex digits: a sha256 as airlock spells it. */
bool al_is_sha256_hex(const char *s);
