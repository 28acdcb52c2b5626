/*
 * What the fuzz targets share: an exact-size copy of the input (so a read
 * past its end is caught by ASan), an invariant check that says which
 * promise broke before it aborts (libFuzzer then saves the input), and the
 * tar checksum repair that lets mutations of an archive reach past
 * libarchive's header check into our own rules.
 */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fuzz_replay_check(void);

#define FUZZ_CHECK(cond, ...)                                                                                         \
    do {                                                                                                              \
        if (!(cond)) {                                                                                                \
            fprintf(stderr, "fuzz invariant broken at %s:%d: ", __FILE__, __LINE__);                                 \
            fprintf(stderr, __VA_ARGS__);                                                                             \
            fputc('\n', stderr);                                                                                      \
            abort();                                                                                                  \
        }                                                                                                             \
    } while (0)

/* A heap copy of exactly SIZE bytes (one NUL after them when TERMINATE, for
 * the parsers that take a C string). */
static inline char *fuzz_copy(const uint8_t *data, size_t size, int terminate) {
    char *b = malloc(size + (terminate ? 1 : 0) + (size == 0 && !terminate));
    if (!b)
        abort();
    memcpy(b, data, size);
    if (terminate)
        b[size] = '\0';
    return b;
}

/* The scratch directory of a target that makes files, on tmpfs when there
 * is one: PREFIX-<pid>-XXXXXX, removed at exit, and the ones of earlier
 * runs whose process is gone removed first (a run that libFuzzer ends with
 * a report, or a signal, skips atexit). */
static char fuzz_scratch[256];
static inline void fuzz_scratch_remove(void) {
    if (fuzz_scratch[0])
        al_rm_tree(AT_FDCWD, fuzz_scratch);
}
static inline const char *fuzz_scratch_root(const char *prefix) {
    if (fuzz_scratch[0])
        return fuzz_scratch;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    DIR *d = opendir(base);
    size_t pl = strlen(prefix);
    for (struct dirent *de; d && (de = readdir(d));) {
        int pid;
        if (strncmp(de->d_name, prefix, pl) == 0 && sscanf(de->d_name + pl, "-%d-", &pid) == 1 && pid > 0 &&
            kill(pid, 0) < 0 && errno == ESRCH) {
            char p[512];
            snprintf(p, sizeof p, "%s/%s", base, de->d_name);
            al_rm_tree(AT_FDCWD, p);
        }
    }
    if (d)
        closedir(d);
    snprintf(fuzz_scratch, sizeof fuzz_scratch, "%s/%s-%d-XXXXXX", base, prefix, (int)getpid());
    if (!mkdtemp(fuzz_scratch))
        abort();
    atexit(fuzz_scratch_remove);
    return fuzz_scratch;
}

/* Whether the first LEN bytes of P hold a NUL. */
static inline int fuzz_has_nul(const void *p, size_t len) { return memchr(p, 0, len) != NULL; }

/* Recompute the checksum of every 512-byte block that looks like a ustar
 * header (libFuzzer's mutations would otherwise almost never pass it). */
static inline void fuzz_tar_fix_checksums(uint8_t *buf, size_t len) {
    for (size_t at = 0; at + 512 <= len; at += 512) {
        uint8_t *h = buf + at;
        if (memcmp(h + 257, "ustar", 5) != 0)
            continue;
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int i = 0; i < 512; i++)
            sum += h[i];
        char ck[8];
        snprintf(ck, sizeof ck, "%06o", sum & 0777777);
        memcpy(h + 148, ck, 7);
        h[155] = ' ';
    }
}

#ifdef AIRLOCK_LIBFUZZER
/* libFuzzer's own mutator, for a custom mutator that repairs afterwards. */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
/* A tar target's mutator: libFuzzer's mutation, then the checksums. */
#define FUZZ_TAR_MUTATOR                                                                                              \
    size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);                   \
    size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {                  \
        (void)seed;                                                                                                   \
        size_t n = LLVMFuzzerMutate(data, size, max_size);                                                            \
        fuzz_tar_fix_checksums(data, n);                                                                              \
        return n;                                                                                                     \
    }
#else
#define FUZZ_TAR_MUTATOR
#endif
