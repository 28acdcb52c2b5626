/*
 * Fuzz target for a skill's uploaded archive (src/core/skill_bundle.c),
 * unpacked into a fresh directory as the service does. Mutations get their
 * tar checksums repaired (FUZZ_TAR_MUTATOR), so they reach past libarchive's
 * header check into our own rules.
 *
 * What must hold: an unpacked tree holds only directories (0755) and
 * regular files (0644 or 0755), no deeper than AL_SKILL_DEPTH_MAX levels,
 * within the caps on files and bytes; nothing is ever created outside its
 * directory; every refusal says why.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "core/skills.h"

FUZZ_TAR_MUTATOR

static char root[256];                 /* our scratch: holds only "t" between inputs */
static long n_unpacked, n_refused, n_deep;

typedef struct walk {
    unsigned files, entries;
    uint64_t bytes;
} walk;

/* Check the unpacked tree at DIRFD, whose entries sit DEPTH levels down
 * ("a" is 1, "a/b" 2): directories and regular files only. The depth is
 * an entry's, so an empty directory at the last level allowed is fine (the
 * old loop counted the directory's own visit, and aborted on a valid
 * bundle holding an empty directory 8 levels deep). */
static void check_tree(int dirfd, unsigned depth, walk *w) {
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d)
        abort();
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            abort();
        w->entries++;
        FUZZ_CHECK(depth <= AL_SKILL_DEPTH_MAX, "%s is %u levels deep", de->d_name, depth);
        if (depth == AL_SKILL_DEPTH_MAX)
            n_deep++;
        if (S_ISDIR(st.st_mode)) {
            if ((st.st_mode & 07777) != 0755)
                abort();
            int sub = openat(dirfd, de->d_name, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0)
                abort();
            check_tree(sub, depth + 1, w);
            close(sub);
        } else if (S_ISREG(st.st_mode)) {
            if ((st.st_mode & 07777) != 0644 && (st.st_mode & 07777) != 0755)
                abort();
            w->files++;
            w->bytes += (uint64_t)st.st_size;
        } else {
            abort(); /* a link, device or fifo got through */
        }
    }
    closedir(d);
}

static void try_unpack(const uint8_t *data, size_t size) {
    int rootfd = open(root, O_DIRECTORY | O_CLOEXEC);
    FUZZ_CHECK(rootfd >= 0 && mkdirat(rootfd, "t", 0755) == 0, "the scratch %s/t: %s (removed by another process?)",
               root, strerror(errno));
    int t = openat(rootfd, "t", O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (t < 0)
        abort();
    al_error err = { 0 };
    int r = al_skill_unpack(t, data, size, &err);
    if (r == 0) {
        n_unpacked++;
        walk w = { 0 };
        check_tree(t, 1, &w);
        if (w.files > AL_SKILL_FILES_MAX || w.bytes > AL_SKILL_BYTES_MAX)
            abort();
    } else {
        n_refused++;
        if (!err.msg[0])
            abort(); /* every refusal says why */
    }
    close(t);
    al_rm_tree(rootfd, "t");
    /* nothing escaped: our scratch is empty again */
    int fd = dup(rootfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            abort();
    if (d)
        closedir(d);
    close(rootfd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!root[0])
        snprintf(root, sizeof root, "%s", fuzz_scratch_root("fuzz-skill-bundle"));
    if (size > (4u << 20))
        return 0;
    uint8_t *buf = (uint8_t *)fuzz_copy(data, size, 0);
    try_unpack(buf, size);
    free(buf);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-skill-bundle: %ld unpacked (%ld entries at the deepest level allowed), %ld refused\n", n_unpacked,
           n_deep, n_refused);
    return n_unpacked && n_refused && n_deep ? 0 : 1;
}
