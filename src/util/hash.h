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
/* At most MAX bytes of FD from its start (pread: its offset is left as it
 * is) hashed into OUT as hex and, when COPY >= 0, written to COPY; how
 * many bytes that was in *RET_GOT (fewer than MAX: FD ended). 0, or
 * -errno on a read or write error. What a file taken from a tenant's or a
 * box's tree is read with: bounded by what was checked, whatever it grows to. */
int al_sha256_fd_capped(int fd, uint64_t max, int copy, char out[65], uint64_t *ret_got);
/* S is 64 lower-case hex digits: a sha256 as airlock spells it. */
bool al_is_sha256_hex(const char *s);
