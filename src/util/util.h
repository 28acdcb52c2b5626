/* Small shared helpers: cleanup attributes, the error object, sizes. */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))

static inline void al_freep(void *p) { free(*(void **)p); }
static inline void al_closep(int *fd) {
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}
static inline void al_fclosep(FILE **f) { if (*f) fclose(*f); }
static inline void al_closedirp(DIR **d) { if (*d) closedir(*d); }

#define _cleanup_free_ _cleanup_(al_freep)
#define _cleanup_close_ _cleanup_(al_closep)
#define _cleanup_fclose_ _cleanup_(al_fclosep)
#define _cleanup_closedir_ _cleanup_(al_closedirp)

/* Hand ownership out of a cleanup-scoped variable. */
#define TAKE_PTR(p) ({ __typeof__(p) _tp = (p); (p) = NULL; _tp; })
#define TAKE_FD(fd) ({ int _tf = (fd); (fd) = -1; _tf; })

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
/* a number's macro as a string literal: #define N 8, AL_STRINGIFY(N) "8" */
#define AL_STRINGIFY_(x) #x
#define AL_STRINGIFY(x) AL_STRINGIFY_(x)

/*
 * Library code never prints: it returns a negative errno and fills one of
 * these, naming the step that failed, so the caller can say what went wrong.
 */
typedef struct al_error {
    char step[48];
    int err;          /* positive errno, 0 if none */
    char msg[512];
} al_error;

/* Fill ERR (if not already set) and return -errnum. */
int al_err(al_error *err, const char *step, int errnum, const char *fmt, ...) _printf_(4, 5);

/* Parse "512M", "64k", "1G", "1024" into bytes; -EINVAL/-ERANGE on bad input. */
int al_parse_size(const char *s, uint64_t *ret_bytes);

/* Parse a non-negative decimal (optionally with one fractional part of up to 3
 * digits) into thousandths: "0.5" -> 500. */
int al_parse_millis(const char *s, uint64_t *ret_millis);

/* Parse a plain unsigned decimal. */
int al_parse_u64(const char *s, uint64_t *ret);

uint64_t al_now_ms(void);

/* A growing buffer with a cap: an HTTP answer read by libcurl. */
typedef struct al_buf {
    char *buf;   /* NUL-terminated; the caller frees it */
    size_t len;
    size_t max;  /* what it may hold */
    bool over;   /* more came than MAX */
} al_buf;
/* libcurl's write callback (CURLOPT_WRITEFUNCTION, CURLOPT_WRITEDATA an
 * al_buf): SIZE * N bytes at P appended, or 0 (the transfer stops) past
 * the cap or out of memory. */
size_t al_buf_write(char *p, size_t size, size_t n, void *userdata);

/* Write all of BUF to FD, retrying on EINTR and short writes. */
int al_write_all(int fd, const void *buf, size_t len);

/* Read a small file (at most MAX bytes) into a NUL-terminated buffer. */
int al_read_small(int dirfd, const char *path, size_t max, char **ret_buf, size_t *ret_len);
/* A regular file of at most MAX bytes (-EFBIG beyond, -EINVAL when it is
 * not a regular file: never blocks on a FIFO or a device) into a
 * NUL-terminated buffer; NOFOLLOW: a link at PATH's end is not followed. */
int al_read_regular(int dirfd, const char *path, size_t max, bool nofollow, char **ret_buf, size_t *ret_len);

/* NAME opened beneath DIRFD (openat2 RESOLVE_BENEATH | NO_SYMLINKS |
 * NO_MAGICLINKS | NO_XDEV, O_CLOEXEC | O_NOFOLLOW, O_NOCTTY unless O_PATH):
 * how whatever a box or a tenant holds is opened, so that no "..", link,
 * magic link or mount point leads out of its tree. An fd, or -errno
 * (-ELOOP a link on the way, -EXDEV a mount point or an escape). EINTR,
 * and EAGAIN (a rename racing the lookup), are tried again a few times. */
int al_openat_beneath(int dirfd, const char *name, int flags, mode_t mode);

/* Write a whole small file, creating or truncating it. */
int al_write_str(int dirfd, const char *path, const char *s);

/* Act on files as another uid/gid for a moment (setfsuid/setfsgid). Going
 * from fsuid 0 to another uid also drops the file capabilities, so the
 * kernel checks permissions exactly as it would for that user. */
typedef struct al_fsid { int uid, gid; } al_fsid;
al_fsid al_fsid_enter(uid_t uid, gid_t gid);
void al_fsid_leave(al_fsid saved);

/* Remove NAME under DIRFD and everything below it, never following a link
 * (a link is removed, not what it points at). Best effort: what cannot be
 * removed is left. */
void al_rm_tree(int dirfd, const char *name);

/* A directory stream of DFD itself ("." opened again: close-on-exec, a
 * position of its own, DFD left open): NULL with errno set. */
DIR *al_dir_open(int dfd);
/* D's next entry other than "." and "..", or NULL at its end. */
struct dirent *al_dir_next(DIR *d);

/* ---- UTF-8 (JSON strings must be valid UTF-8: jansson refuses anything
 * else, and a json_pack over a string cut inside a character fails) */

/* Length of the valid UTF-8 sequence at S (1-4, within N bytes), or 0 when
 * there is none: jansson's rules (no overlong forms, no surrogates, nothing
 * past U+10FFFF). */
size_t al_utf8_seq(const unsigned char *s, size_t n);
/* The index of NAME in the N names of an enum's table (NULL entries
 * skipped), or -1: the one parse of an enum's name. */
int al_name_index(const char *const *names, size_t n, const char *name);
/* The same, and the code point it encodes in *RET_CP. */
size_t al_utf8_decode(const unsigned char *s, size_t n, uint32_t *ret_cp);
/* Where to cut S (LEN bytes) to keep at most MAX bytes without ending inside
 * a character: MAX backed off over the continuation bytes at the cut. */
size_t al_utf8_cut(const char *s, size_t len, size_t max);
/* Make the NUL-terminated S valid UTF-8 in place, never longer: an
 * incomplete character at its end (a snprintf that ran out of room, a cut
 * preview) is dropped; every other byte that is not part of a valid
 * sequence becomes '?'. Returns S. */
char *al_utf8_fix(char *s);
/* Make the LEN bytes at S valid UTF-8 in place, the same length: every byte
 * that is not part of a valid sequence becomes '?' (NULs are kept).
 * Returns LEN. */
size_t al_utf8_scrub(char *s, size_t len);
