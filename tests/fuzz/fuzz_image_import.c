/*
 * al_image_import on a hostile tarball: a `docker save` or OCI layout an
 * operator or tenant imports, outer archive and layers alike. The input is
 * the tarball, handed over as /proc/self/fd/N of a memfd (import opens it
 * by name, and a memfd costs no disk); it is imported into a fresh images
 * directory under a mkdtemp root. Whatever it holds:
 *  - a refusal says why (err.msg) and leaves the images directory as it
 *    was: no image, no work directory, no spooled copy;
 *  - an import is one image, sha256-<digest>, that verifies, whose tree
 *    holds no device, FIFO, socket or setuid/setgid file, and whose files
 *    (every name of a hard-linked one counted) stay within the byte and
 *    entry caps the target sets;
 *  - nothing is made outside the images directory: the root holds it
 *    alone, and a canary directory at a fixed path (one a seed's absolute
 *    symlink names) stays empty.
 * The image is removed after each input, so every input starts clean.
 */
#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "image/image.h"

/* The caps the target imports under (import honours lower ones from the
 * environment): small enough that a sparse or hard-linked giant is
 * refused quickly, large enough for every seed. */
#define FUZZ_MAX_BYTES (4u << 20)
#define FUZZ_MAX_ENTRIES 4096u
/* Seeds name it in absolute symlinks: an entry written through one would
 * land here. */
#define CANARY "/tmp/airlock-fuzz-image-import-canary"
static bool canary_mine;

static char root[256], images[300], tarball[64];
static int memfd = -1;

/* what the replayed corpus reached (fuzz_replay_check) */
static struct {
    unsigned ok, ok_oci, ok_hardlink, ok_symlink, ok_whiteout_dir, refused, refused_cap;
} seen;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char cap[32];
    snprintf(cap, sizeof cap, "%u", FUZZ_MAX_BYTES);
    setenv("AIRLOCK_IMPORT_MAX_BYTES", cap, 1);
    snprintf(cap, sizeof cap, "%u", FUZZ_MAX_ENTRIES);
    setenv("AIRLOCK_IMPORT_MAX_ENTRIES", cap, 1);
    /* tmpfs when there is one: every input makes and removes a tree */
    snprintf(root, sizeof root, "%s", fuzz_scratch_root("fuzz-image-import"));
    snprintf(images, sizeof images, "%s/images", root);
    al_error err = { 0 };
    if (al_image_dir_make(images, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        abort();
    }
    /* the canary's path is fixed (the seeds' links name it), so it is one
     * process's at a time: a second run at once (a replay beside a fuzzing
     * campaign) would empty it under the first, or fill it, and make a
     * report of nothing. The process that cannot lock it does not check it. */
    int lock = open(CANARY ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    canary_mine = lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) == 0;
    if (!canary_mine)
        fprintf(stderr, "fuzz-image-import: %s is another run's: not checked by this one\n", CANARY);
    /* emptied first: a crashed earlier run may have left a finding in it */
    if (canary_mine) {
        al_rm_tree(AT_FDCWD, CANARY);
        if (mkdir(CANARY, 0700) < 0 && errno != EEXIST)
            abort();
    }
    memfd = memfd_create("fuzz-image-import", MFD_CLOEXEC);
    if (memfd < 0)
        abort();
    snprintf(tarball, sizeof tarball, "/proc/self/fd/%d", memfd);
    return 0;
}

/* How many names DIR holds (not . and ..), -1 when it cannot be read; the
 * first one found in ONE (every check expects none, or one). */
static int list_dir(const char *dir, char *one, size_t len) {
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    one[0] = '\0';
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n++ == 0)
            snprintf(one, len, "%s", de->d_name);
    }
    closedir(d);
    return n;
}

typedef struct tree_stats {
    uint64_t bytes, entries;
    bool hardlink, symlink;
} tree_stats;

/* Walk the tree at DFD (never following a link) and check every entry. */
static void check_tree(int dfd, const char *path, int depth, tree_stats *ts) {
    FUZZ_CHECK(depth <= AL_IMAGE_MAX_DEPTH + 1, "%s: deeper than an image may be", path);
    DIR *d = fdopendir(dfd);
    FUZZ_CHECK(d, "opendir %s: %s", path, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        FUZZ_CHECK(fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0, "stat %s/%s", path, de->d_name);
        ts->entries++;
        FUZZ_CHECK(!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode),
                   "%s/%s: a device, FIFO or socket in an imported tree (mode %o)", path, de->d_name, st.st_mode);
        FUZZ_CHECK(!(st.st_mode & (S_ISUID | S_ISGID)), "%s/%s: setuid/setgid in an imported tree (mode %o)", path,
                   de->d_name, st.st_mode);
        if (S_ISREG(st.st_mode)) {
            ts->bytes += (uint64_t)st.st_size;
            if (st.st_nlink > 1)
                ts->hardlink = true;
        } else if (S_ISLNK(st.st_mode)) {
            ts->symlink = true;
        } else if (S_ISDIR(st.st_mode)) {
            int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            FUZZ_CHECK(sub >= 0, "open %s/%s: %s", path, de->d_name, strerror(errno));
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", path, de->d_name);
            check_tree(sub, p, depth + 1, ts);
        } else {
            FUZZ_CHECK(0, "%s/%s: an unknown file type (mode %o)", path, de->d_name, st.st_mode);
        }
    }
    closedir(d);
}

static bool has(const uint8_t *data, size_t size, const char *s) { return memmem(data, size, s, strlen(s)) != NULL; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (memfd < 0)
        LLVMFuzzerInitialize(NULL, NULL);
    if (ftruncate(memfd, 0) < 0 || pwrite(memfd, data, size, 0) != (ssize_t)size)
        abort();
    al_error err = { 0 };
    char digest[65] = "";
    int r = al_image_import(images, tarball, digest, &err);
    char one[300];
    /* FUZZ_VERBOSE=1: what each replayed input came to (to check a seed) */
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "%zu bytes: %s\n", size, r < 0 ? err.msg : digest);

    /* whatever happened, the root holds the images directory alone */
    FUZZ_CHECK(list_dir(root, one, sizeof one) == 1 && strcmp(one, "images") == 0,
               "the import made something beside the images directory (%s)", one);
    FUZZ_CHECK(!canary_mine || list_dir(CANARY, one, sizeof one) == 0, "the import wrote %s/%s, outside the images directory", CANARY, one);
    int n = list_dir(images, one, sizeof one);
    if (r < 0) {
        FUZZ_CHECK(err.msg[0], "refused (%d) without saying why", r);
        FUZZ_CHECK(n == 0, "a refused import (%s) left %s in the images directory", err.msg, one);
        seen.refused++;
        if (r == -EFBIG || r == -E2BIG)
            seen.refused_cap++;
        return 0;
    }
    FUZZ_CHECK(r == 0, "al_image_import returned %d", r);
    FUZZ_CHECK(strlen(digest) == 64 && strspn(digest, "0123456789abcdef") == 64, "digest \"%s\" is not sha256 hex", digest);
    char name[80];
    snprintf(name, sizeof name, "sha256-%s", digest);
    FUZZ_CHECK(n == 1 && strcmp(one, name) == 0, "an import left %d entries (%s) in the images directory, not only %s", n,
               one, name);
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", images, name);
    al_error verr = { 0 };
    FUZZ_CHECK(al_image_verify(dir, digest, &verr) == 1, "the imported image does not verify: %s", verr.msg);

    char rootfs[450];
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
    int rfd = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    FUZZ_CHECK(rfd >= 0, "open %s: %s", rootfs, strerror(errno));
    tree_stats ts = { 0 };
    check_tree(rfd, "rootfs", 0, &ts);
    FUZZ_CHECK(ts.entries > 0, "an imported image holds nothing");
    FUZZ_CHECK(ts.bytes <= FUZZ_MAX_BYTES, "the tree holds %llu bytes, over the %u cap", (unsigned long long)ts.bytes,
               FUZZ_MAX_BYTES);
    FUZZ_CHECK(ts.entries <= FUZZ_MAX_ENTRIES, "the tree holds %llu entries, over the %u cap",
               (unsigned long long)ts.entries, FUZZ_MAX_ENTRIES);

    seen.ok++;
    if (has(data, size, "index.json"))
        seen.ok_oci++;
    if (ts.hardlink)
        seen.ok_hardlink++;
    if (ts.symlink)
        seen.ok_symlink++;
    if (has(data, size, ".wh..wh..opq"))
        seen.ok_whiteout_dir++;

    FUZZ_CHECK(al_image_remove(images, digest, &verr) == 0, "remove: %s", verr.msg);
    FUZZ_CHECK(list_dir(images, one, sizeof one) == 0, "al_image_remove left %s", one);
    return 0;
}

/* The repair also reaches the layers' own headers in a plain outer
 * tarball: an entry's data starts on a 512-byte boundary of the outer
 * archive, so an inner header (512-aligned in its layer) is 512-aligned in
 * the outer one too, and fuzz_tar_fix_checksums scans every block. */
FUZZ_TAR_MUTATOR

/* A corpus that only ever reaches refusals proves little: it must import
 * docker-save and OCI images, with hard links, symlinks and an opaque
 * whiteout in them, and meet the caps. */
int fuzz_replay_check(void) {
    printf("image-import: %u imported (%u OCI, %u with a hard link, %u with a symlink, %u with an opaque whiteout), "
           "%u refused (%u at a cap)\n",
           seen.ok, seen.ok_oci, seen.ok_hardlink, seen.ok_symlink, seen.ok_whiteout_dir, seen.refused, seen.refused_cap);
    return seen.ok >= 2 && seen.ok_oci && seen.ok_hardlink && seen.ok_symlink && seen.ok_whiteout_dir && seen.refused &&
                   seen.refused_cap
               ? 0
               : 1;
}
