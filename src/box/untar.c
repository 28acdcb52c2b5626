/* A tar of a box's directory unpacked beneath ours (untar.h): moved here
 * from src/docker/tar_io.c so that the docker and Kubernetes boxes share
 * one unpacker. Every name is taken beneath OUTFD, one component at a
 * time (openat2 RESOLVE_BENEATH), ".." refused, depth bounded. */
#include "untar.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Make the directories of REL (a path from the tar) beneath DIRFD and
 * return an fd of its parent, with its last component in *LEAF. */
static int open_parent(int dirfd, char *rel, const char **leaf, unsigned max_depth) {
    int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    unsigned depth = 0;
    char *save = NULL, *part = strtok_r(rel, "/", &save);
    while (part) {
        char *next = strtok_r(NULL, "/", &save);
        if (!next) {
            *leaf = part;
            return cur;
        }
        if (strcmp(part, ".") == 0) {
            part = next;
            continue;
        }
        if (strcmp(part, "..") == 0 || ++depth > max_depth + 1) {
            close(cur);
            return -EINVAL;
        }
        mkdirat(cur, part, 0700);
        int fd = al_openat_beneath(cur, part, O_DIRECTORY | O_RDONLY, 0);
        close(cur);
        if (fd < 0)
            return fd;
        cur = fd;
        part = next;
    }
    close(cur);
    return -EINVAL;
}

/* the directories above PN's leaf, "." not counted: open_parent's depth */
static uint64_t path_depth(const char *pn) {
    uint64_t d = 0;
    for (const char *p = pn; *p;) {
        size_t n = strcspn(p, "/");
        bool last = p[n] == '\0' || p[n + strspn(p + n, "/")] == '\0';
        if (n && !(n == 1 && p[0] == '.') && !last)
            d++;
        p += n;
        p += strspn(p, "/");
    }
    return d;
}

int al_untar(const char *dir, const al_collect_limits *cl, int tarfd, int outfd, al_box_result *into,
                  al_error *err) {
    char why[96];
    struct archive *a = archive_read_new();
    if (!a)
        return al_err(err, "collect", ENOMEM, "libarchive");
    archive_read_support_format_tar(a);
    int r = 0;
    if (archive_read_open_fd(a, tarfd, 65536) != ARCHIVE_OK) {
        r = al_err(err, "collect", EIO, "read /%s's tar: %s", dir, archive_error_string(a));
        archive_read_free(a);
        return r;
    }
    uint64_t entries = 0, max_entries = cl->max_entries;
    struct archive_entry *ent;
    while (r == 0 && archive_read_next_header(a, &ent) == ARCHIVE_OK) {
        const char *pn = archive_entry_pathname(ent);
        if (!pn)
            continue;
        if (++entries > max_entries) {
            snprintf(why, sizeof why, "entry limit reached: the rest of /%s was not examined", dir);
            r = al_collect_add_skip(into, pn, why);
            break;
        }
        char rel[4096];
        if (strlen(pn) >= sizeof rel) {
            /* cut to fit, it would be another name (a prefix of the box's,
             * maybe one of its other files'): named as skipped instead,
             * unless it is past the depth cap, which collect names once at
             * the cap (as for a shorter path there, below) */
            if (path_depth(pn) <= cl->max_depth + 1)
                r = al_collect_add_skip(into, pn, "its path is over 4095 bytes");
            continue;
        }
        snprintf(rel, sizeof rel, "%s", pn);
        size_t n = strlen(rel);
        while (n > 1 && rel[n - 1] == '/')
            rel[--n] = '\0';
        if (strcmp(rel, ".") == 0 || strcmp(rel, "./") == 0)
            continue;
        const char *leaf = NULL;
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", rel);
        int pfd = open_parent(outfd, tmp, &leaf, (unsigned)cl->max_depth);
        const char *shown = strncmp(rel, "./", 2) == 0 ? rel + 2 : rel;
        if (pfd < 0) {
            /* past the depth cap (or not a path beneath /out): collect
             * names the directory at the cap, as it does for the native box */
            continue;
        }
        mode_t type = archive_entry_filetype(ent);
        if (type == AE_IFDIR) {
            mkdirat(pfd, leaf, 0700);
        } else if (type == AE_IFREG && !archive_entry_hardlink(ent)) {
            int fd = al_openat_beneath(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL,
                                       archive_entry_perm(ent) & 0111 ? 0700 : 0600);
            /* past the per-file cap is enough for collect to skip it */
            uint64_t left = cl->max_file_bytes + 1;
            char buf[65536];
            la_ssize_t k = 0;
            bool wrote = true;
            int werr = 0;
            while (fd >= 0 && left && (k = archive_read_data(a, buf, sizeof buf < left ? sizeof buf : left)) > 0) {
                if (al_write_all(fd, buf, (size_t)k) < 0) {
                    wrote = false;
                    werr = errno;
                    break;
                }
                left -= (uint64_t)k;
            }
            if (fd >= 0)
                close(fd);
            /* a file the stream ended inside (the tar cut at its bound) is
             * not an artifact: what there is of it is not what /out held;
             * nor is one our side could not write whole (our disk full) */
            if (fd >= 0 && (k < 0 || !wrote)) {
                unlinkat(pfd, leaf, 0);
                if (k < 0)
                    snprintf(why, sizeof why, "cut off: /%s's tar exceeded its bound", dir);
                else
                    snprintf(why, sizeof why, "not collected: airlock could not write it (%s)", strerror(werr));
                r = al_collect_add_skip(into, shown, why);
            }
        } else if (archive_entry_hardlink(ent)) {
            /* another name of a file already extracted */
            char tgt[4096];
            /* a target cut to fit would link another file of the box's */
            int src = (size_t)snprintf(tgt, sizeof tgt, "%s", archive_entry_hardlink(ent)) >= sizeof tgt
                ? -ENAMETOOLONG : al_openat_beneath(outfd, strncmp(tgt, "./", 2) == 0 ? tgt + 2 : tgt, O_PATH, 0);
            if (src >= 0) {
                if (linkat(src, "", pfd, leaf, AT_EMPTY_PATH) < 0)
                    r = al_collect_add_skip(into, shown, "a hard link that could not be read back");
                close(src);
            }
        } else if (type == AE_IFLNK) {
            /* made as what it was, so collect names it as native does */
            if (symlinkat(archive_entry_symlink(ent) ?: "", pfd, leaf) < 0)
                r = al_collect_add_skip(into, shown, "symbolic link (not followed)");
        } else if (type == AE_IFIFO) {
            mknodat(pfd, leaf, S_IFIFO | 0600, 0);
        } else {
            r = al_collect_add_skip(into, shown, "not a regular file");
        }
        close(pfd);
    }
    archive_read_free(a);
    return r;
}

bool al_untar_unreadable(const char *line, al_box_result *into) {
    char m[512];
    snprintf(m, sizeof m, "%s", line);
    char *end = strstr(m, ": Cannot open: ");
    if (strncmp(m, "tar: ", 5) != 0 || !end)
        return false;
    *end = '\0';
    size_t n = strlen(m);
    if (n >= 5 + 9 && strcmp(m + n - 9, ": Warning") == 0)
        m[n - 9] = '\0';
    const char *p = strncmp(m + 5, "./", 2) == 0 ? m + 7 : m + 5;
    char why[200];
    snprintf(why, sizeof why, "unreadable: %.150s", end + strlen(": Cannot open: "));
    al_collect_add_skip(into, p, why);
    return true;
}
