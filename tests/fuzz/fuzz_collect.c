/*
 * Fuzz target for collecting /out (src/box/collect.c, al_collect): the
 * tree a hostile script leaves behind, which airlock copies to the host
 * and the service stores as artifacts. The input describes a tree, built
 * in a fresh directory on tmpfs, entry by entry:
 *   [kind][name length][name bytes][data length][data bytes]
 * where a name is a path ('/' separates components, missing directories
 * are made) and kind is a regular file of those bytes, a directory, a
 * symlink to them, a FIFO, a hard link to an earlier path, a sparse file
 * of that many MiB, or a file whose first two data bytes are its mode.
 *
 * What must hold, whatever the tree: every artifact is a path of valid,
 * control-free names within the depth cap, its copy on the host is a
 * regular file (0644) whose size and SHA-256 are the artifact's and the
 * source's; the caps on files, bytes per file and in all hold; the host
 * tree holds nothing but the artifacts and their directories (no link, no
 * FIFO, no other file); every skip says why; and the box's tree is as it
 * was (collecting writes nothing there).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "box/collect.h"
#include "fuzz.h"
#include "util/hash.h"
#include "util/util.h"

static char root[256];
static long n_artifacts, n_skipped, n_trees;

static const al_collect_limits lim = { .max_files = 16, .max_file_bytes = 1 << 16, .max_total_bytes = 1 << 18,
                                       .max_depth = 4, .max_entries = 64, .uid = 0, .gid = 0 };

/* Open (making when missing) the directories of PATH's parent; returns
 * the parent's fd and its last component in *LAST, or -1. */
static int parent_of(int top, char *path, char **last) {
    int fd = dup(top);
    char *save = NULL, *c = strtok_r(path, "/", &save), *next;
    while (c && (next = strtok_r(NULL, "/", &save))) {
        if (strcmp(c, ".") == 0 || strcmp(c, "..") == 0) {
            close(fd);
            return -1;
        }
        mkdirat(fd, c, 0755);
        int sub = openat(fd, c, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(fd);
        if (sub < 0)
            return -1;
        fd = sub;
        c = next;
    }
    if (!c || strcmp(c, ".") == 0 || strcmp(c, "..") == 0) {
        close(fd);
        return -1;
    }
    *last = c;
    return fd;
}

static void build(int top, const uint8_t *p, size_t n) {
    size_t at = 0;
    for (int k = 0; k < 48 && at + 2 <= n; k++) {
        uint8_t kind = p[at] % 7, nl = p[at + 1];
        at += 2;
        if (at + nl + 1 > n)
            break;
        char name[256];
        memcpy(name, p + at, nl);
        name[nl] = '\0';
        at += nl;
        uint8_t dl = p[at++];
        if (at + dl > n)
            dl = (uint8_t)(n - at);
        const uint8_t *data = p + at;
        at += dl;
        if (strlen(name) != nl)
            continue; /* a NUL: no such name on a file system */
        char *last;
        int dir = parent_of(top, name, &last);
        if (dir < 0)
            continue;
        char target[256];
        memcpy(target, data, dl);
        target[dl] = '\0';
        if (kind == 0 || kind == 5 || kind == 6) {
            int fd = openat(dir, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (fd >= 0) {
                if (kind == 5) {
                    if (ftruncate(fd, (off_t)dl << 20) < 0)
                        abort();
                } else if (al_write_all(fd, data, dl) < 0) {
                    abort();
                }
                if (kind == 6 && dl >= 2)
                    fchmod(fd, (mode_t)((data[0] | data[1] << 8) & 07777));
                close(fd);
            }
        } else if (kind == 1) {
            mkdirat(dir, last, 0755);
        } else if (kind == 2) {
            /* a name taken already (a repeated path) is no link: fine */
            if (strlen(target) == dl && symlinkat(target, dir, last) < 0 && errno != EEXIST && errno != ENOENT)
                abort();
        } else if (kind == 3) {
            mkfifoat(dir, last, 0644);
        } else if (kind == 4 && strlen(target) == dl && target[0] && !strstr(target, "..")) {
            int lr = linkat(top, target, dir, last, 0); /* to no earlier file: no link, fine */
            (void)lr;
        }
        close(dir);
    }
}

/* A listing of the tree at FD: "path type size mode" lines, sorted. */
static void listing(int fd, const char *rel, char **out, size_t *len, size_t *cap) {
    int d2 = dup(fd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!d)
        abort();
    rewinddir(d); /* a dup shares the offset: start from the first entry */
    struct dirent **ents = NULL;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        ents = realloc(ents, (size_t)(n + 1) * sizeof *ents);
        ents[n] = malloc(sizeof **ents);
        memcpy(ents[n++], de, sizeof **ents);
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (fstatat(fd, ents[i]->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            abort();
        char line[1024];
        int l = snprintf(line, sizeof line, "%s/%s %o %lld\n", rel, ents[i]->d_name, (unsigned)st.st_mode,
                         (long long)st.st_size);
        if (*len + (size_t)l + 1 > *cap) {
            *cap = (*len + (size_t)l + 1) * 2;
            *out = realloc(*out, *cap);
        }
        memcpy(*out + *len, line, (size_t)l + 1);
        *len += (size_t)l;
        if (S_ISDIR(st.st_mode)) {
            int sub = openat(fd, ents[i]->d_name, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0)
                abort();
            char r2[600];
            snprintf(r2, sizeof r2, "%s/%s", rel, ents[i]->d_name);
            listing(sub, r2, out, len, cap);
            close(sub);
        }
        free(ents[i]);
    }
    free(ents);
}

static char *list_tree(int fd) {
    char *out = NULL;
    size_t len = 0, cap = 0;
    listing(fd, "", &out, &len, &cap);
    return out ? out : strdup("");
}

/* The host tree holds the artifacts and their directories, nothing else:
 * counts the regular files found, all of which must be artifacts. */
static unsigned check_host(int fd, const char *rel, unsigned depth, const al_box_result *res) {
    int d2 = dup(fd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    unsigned files = 0;
    FUZZ_CHECK(d && depth <= lim.max_depth, "host tree too deep");
    rewinddir(d);
    for (struct dirent *de; (de = readdir(d));) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        FUZZ_CHECK(fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0, "stat on the host");
        char path[600];
        snprintf(path, sizeof path, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name);
        if (S_ISDIR(st.st_mode)) {
            int sub = openat(fd, de->d_name, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            files += check_host(sub, path, depth + 1, res);
            close(sub);
            continue;
        }
        FUZZ_CHECK(S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0644, "%s on the host: mode %o", path,
                   (unsigned)st.st_mode);
        const al_artifact *a = NULL;
        for (size_t i = 0; i < res->n_artifacts; i++)
            if (strcmp(res->artifacts[i].path, path) == 0)
                a = &res->artifacts[i];
        FUZZ_CHECK(a, "%s is on the host but no artifact", path);
        int f = openat(fd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        char hex[65];
        uint64_t size = 0;
        FUZZ_CHECK(f >= 0 && al_sha256_fd(f, hex, &size) == 0, "read %s", path);
        close(f);
        FUZZ_CHECK(size == a->size && strcmp(hex, a->sha256) == 0, "%s: the copy is not the artifact", path);
        files++;
    }
    closedir(d);
    return files;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 8192)
        return 0;
    if (!root[0])
        snprintf(root, sizeof root, "%s", fuzz_scratch_root("fuzz-collect"));
    int rootfd = open(root, O_DIRECTORY | O_CLOEXEC);
    FUZZ_CHECK(rootfd >= 0 && mkdirat(rootfd, "out", 0755) == 0 && mkdirat(rootfd, "host", 0700) == 0, "scratch");
    int out = openat(rootfd, "out", O_DIRECTORY | O_CLOEXEC), host = openat(rootfd, "host", O_DIRECTORY | O_CLOEXEC);
    build(out, data, size);
    char *before = list_tree(out);
    lseek(out, 0, SEEK_SET); /* the listing read the directory through a dup */
    al_box_result res = { 0 };
    al_error err = { 0 };
    int r = al_collect(out, host, &lim, &res, &err);
    FUZZ_CHECK(r == 0, "al_collect failed: %s", err.msg);
    n_trees++;
    char *after = list_tree(out);
    FUZZ_CHECK(strcmp(before, after) == 0, "collecting changed the box's tree:\n%s---\n%s", before, after);
    FUZZ_CHECK(res.n_artifacts <= lim.max_files, "more artifacts than the cap");
    uint64_t total = 0;
    for (size_t i = 0; i < res.n_artifacts; i++) {
        const al_artifact *a = &res.artifacts[i];
        FUZZ_CHECK(a->size <= lim.max_file_bytes, "%s is over the per-file cap", a->path);
        total += a->size;
        unsigned depth = 1;
        char *p = strdup(a->path), *save = NULL;
        for (char *c = strtok_r(p, "/", &save); c; c = strtok_r(NULL, "/", &save), depth++)
            FUZZ_CHECK(!al_collect_name_problem(c) && strcmp(c, ".") && strcmp(c, ".."), "artifact %s", a->path);
        free(p);
        FUZZ_CHECK(depth - 1 <= lim.max_depth + 1, "artifact %s too deep", a->path);
        /* the source it came from holds the same bytes */
        int f = al_openat_beneath(out, a->path, O_RDONLY, 0);
        char hex[65];
        uint64_t sz = 0;
        FUZZ_CHECK(f >= 0 && al_sha256_fd(f, hex, &sz) == 0 && sz == a->size && strcmp(hex, a->sha256) == 0,
                   "artifact %s is not its source", a->path);
        close(f);
    }
    FUZZ_CHECK(total <= lim.max_total_bytes, "over the total cap");
    FUZZ_CHECK(check_host(host, "", 0, &res) == res.n_artifacts, "the host holds a different number of files");
    for (size_t i = 0; i < res.n_skipped; i++)
        FUZZ_CHECK(res.skipped[i].why && res.skipped[i].why[0] && res.skipped[i].path, "a skip without a reason");
    n_artifacts += (long)res.n_artifacts;
    n_skipped += (long)res.n_skipped;
    al_box_result_free(&res);
    free(before);
    free(after);
    close(out);
    close(host);
    al_rm_tree(rootfd, "out");
    al_rm_tree(rootfd, "host");
    close(rootfd);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-collect: %ld trees, %ld artifacts, %ld skipped\n", n_trees, n_artifacts, n_skipped);
    return n_artifacts && n_skipped ? 0 : 1;
}
