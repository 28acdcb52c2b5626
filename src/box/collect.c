#include "collect.h"
#include "../util/hash.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <nettle/sha2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define AS_BOX(lim, expr) ({ al_fsid _s = al_fsid_enter((lim)->uid, (lim)->gid); __typeof__(expr) _v = (expr); int _e = errno; al_fsid_leave(_s); errno = _e; _v; })

typedef struct frame {
    int src, dst;                 /* box dir, host dir (or -1) */
    char *rel;                    /* path under /out, "" for the top */
    unsigned depth;
    DIR *d;
} frame;

static char *join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s)
        return NULL;
    memcpy(s, a, la);
    size_t o = la;
    if (la)
        s[o++] = '/';
    memcpy(s + o, b, lb + 1);
    return s;
}

int al_collect_add_skip(al_box_result *res, const char *rel, const char *why) {
    al_skip *n = realloc(res->skipped, (res->n_skipped + 1) * sizeof *n);
    if (!n)
        return -ENOMEM;
    res->skipped = n;
    n[res->n_skipped] = (al_skip){ .path = strdup(rel), .why = strdup(why), .kind = AL_SKIP_OTHER };
    if (!n[res->n_skipped].path || !n[res->n_skipped].why)
        return -ENOMEM;
    res->n_skipped++;
    return 0;
}

/* A skip of KIND, as al_collect_add_skip. */
static int add_kind_skip(al_box_result *res, const char *rel, const char *why, al_skip_kind kind) {
    int r = al_collect_add_skip(res, rel, why);
    if (r == 0)
        res->skipped[res->n_skipped - 1].kind = kind;
    return r;
}

static int add_cap_skip(al_box_result *res, const char *rel, const char *why) {
    return add_kind_skip(res, rel, why, AL_SKIP_CAP);
}

static int add_artifact(al_box_result *res, const char *rel, uint64_t size, const char *hex) {
    al_artifact *n = realloc(res->artifacts, (res->n_artifacts + 1) * sizeof *n);
    if (!n)
        return -ENOMEM;
    res->artifacts = n;
    n[res->n_artifacts].path = strdup(rel);
    if (!n[res->n_artifacts].path)
        return -ENOMEM;
    n[res->n_artifacts].size = size;
    memcpy(n[res->n_artifacts].sha256, hex, 65);
    res->n_artifacts++;
    return 0;
}

/* C0 and C1 controls, DEL, and the bidirectional embeddings, overrides and
 * isolates: none belongs in a file name, and each can make a name read as
 * another in a log, a terminal or a listing. */
static bool control_cp(uint32_t cp) {
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

/* Why NAME (one directory entry) is not collected, or NULL. A name is
 * reported exactly as it is stored, so it must be valid UTF-8 (the JSON
 * that carries it): two names that only a lossy conversion would tell
 * apart must never reach the service as the same string. */
const char *al_collect_name_problem(const char *name) {
    const unsigned char *u = (const unsigned char *)name;
    size_t n = strlen(name);
    const char *why = NULL;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t k = al_utf8_decode(u + i, n - i, &cp);
        if (k == 0)
            return "name is not valid UTF-8 (shown escaped; not collected)";
        if (control_cp(cp))
            why = "name has a control or bidirectional-override character (shown escaped; not collected)";
        i += k;
    }
    return why;
}

/* NAME as printable ASCII-safe text: bytes of invalid sequences and control
 * characters as \xNN (each UTF-8 byte of a control), a backslash doubled,
 * so that the display of two different names never coincides. */
char *al_collect_name_escape(const char *name) {
    const unsigned char *u = (const unsigned char *)name;
    size_t n = strlen(name);
    char *out = malloc(n * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t k = al_utf8_decode(u + i, n - i, &cp);
        if (k == 0 || control_cp(cp)) {
            size_t m = k ? k : 1;
            for (size_t j = 0; j < m; j++)
                o += (size_t)snprintf(out + o, 5, "\\x%02x", u[i + j]);
            i += m;
        } else if (u[i] == '\\') {
            out[o++] = '\\';
            out[o++] = '\\';
            i++;
        } else {
            memcpy(out + o, name + i, k);
            o += k;
            i += k;
        }
    }
    out[o] = '\0';
    return out;
}

static const char *type_name(mode_t m) {
    if (S_ISLNK(m)) return "symbolic link (not followed)";
    if (S_ISFIFO(m)) return "fifo (not a regular file)";
    if (S_ISSOCK(m)) return "socket (not a regular file)";
    if (S_ISCHR(m) || S_ISBLK(m)) return "device node (not a regular file)";
    return "not a regular file";
}

/* Copy one regular file; returns 1 when collected, 0 when skipped. */
static int copy_one(int src_dir, int dst_dir, const char *name, const char *rel, const struct stat *pre,
                    const al_collect_limits *lim, uint64_t *total, al_box_result *res) {
    char why[160];
    if ((uint64_t)pre->st_size > lim->max_file_bytes) {
        snprintf(why, sizeof why, "larger than the per-file cap (%llu > %llu bytes)",
                 (unsigned long long)pre->st_size, (unsigned long long)lim->max_file_bytes);
        return add_cap_skip(res, rel, why);
    }
    if (*total + (uint64_t)pre->st_size > lim->max_total_bytes) {
        snprintf(why, sizeof why, "total artifact cap reached (%llu bytes)", (unsigned long long)lim->max_total_bytes);
        return add_cap_skip(res, rel, why);
    }
    /* O_NONBLOCK: if the entry were swapped for a fifo, opening must not block */
    _cleanup_close_ int in = AS_BOX(lim, al_openat_beneath(src_dir, name, O_RDONLY | O_NONBLOCK, 0));
    if (in < 0) {
        snprintf(why, sizeof why, "unreadable: %s", strerror(-in));
        return al_collect_add_skip(res, rel, why);
    }
    struct stat st;
    if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode) || st.st_ino != pre->st_ino || st.st_dev != pre->st_dev)
        return al_collect_add_skip(res, rel, "changed while being collected");
    _cleanup_close_ int out = -1;
    if (dst_dir >= 0) {
        out = al_openat_beneath(dst_dir, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0) {
            snprintf(why, sizeof why, "cannot write on the host: %s", strerror(-out));
            return al_collect_add_skip(res, rel, why);
        }
        /* normalised: no setuid, setgid or odd bits; no exec bit but in a
         * working directory that outlives the box (a script made
         * executable is run by the next command) */
        fchmod(out, lim->keep_exec && (pre->st_mode & 0111) ? 0755 : 0644);
    }
    struct sha256_ctx md;
    sha256_init(&md);
    char buf[65536];
    uint64_t got = 0;
    const char *fail = NULL;
    bool capped = false;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(why, sizeof why, "read failed: %s", strerror(errno));
            fail = why;
            break;
        }
        if (n == 0)
            break;
        got += (uint64_t)n;
        /* caps hold on bytes read, not on what stat said */
        if (got > lim->max_file_bytes || *total + got > lim->max_total_bytes) {
            fail = "grew past the cap while being read";
            capped = true;
            break;
        }
        sha256_update(&md, (size_t)n, (const uint8_t *)buf);
        if (out >= 0 && al_write_all(out, buf, (size_t)n) < 0) {
            snprintf(why, sizeof why, "cannot write on the host: %s", strerror(errno));
            fail = why;
            break;
        }
    }
    char hex[65];
    al_sha256_finish_hex(&md, hex);
    if (fail) {
        if (out >= 0)
            unlinkat(dst_dir, name, 0);
        return capped ? add_cap_skip(res, rel, fail) : al_collect_add_skip(res, rel, fail);
    }
    *total += got;
    int r = add_artifact(res, rel, got, hex);
    return r < 0 ? r : 1;
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const al_artifact *)a)->path, ((const al_artifact *)b)->path);
}

static int skip_by_path(const void *a, const void *b) {
    return strcmp(((const al_skip *)a)->path, ((const al_skip *)b)->path);
}

int al_collect(int outfd, int hostfd, const al_collect_limits *lim, al_box_result *res, al_error *err) {
    /* An explicit stack: depth is capped, and recursion would put the cap
     * on the C stack instead. */
    size_t cap = lim->max_depth + 2;
    _cleanup_free_ frame *stack = calloc(cap, sizeof *stack);
    if (!stack)
        return -ENOMEM;
    size_t sp = 0;
    int top = fcntl(outfd, F_DUPFD_CLOEXEC, 3);
    if (top < 0)
        return al_err(err, "collect", errno, "dup /out: %m");
    stack[sp++] = (frame){ .src = top, .dst = hostfd >= 0 ? fcntl(hostfd, F_DUPFD_CLOEXEC, 3) : -1, .rel = strdup(""), .depth = 0 };
    uint64_t files = 0, entries = 0, total = 0;
    int r = 0;
    bool entries_capped = false;

    while (sp > 0 && r >= 0) {
        _cleanup_free_ char *rel = NULL;
        frame *f = &stack[sp - 1];
        if (!f->d) {
            int dfd = fcntl(f->src, F_DUPFD_CLOEXEC, 3);
            f->d = dfd >= 0 ? fdopendir(dfd) : NULL;
            if (!f->d) {
                if (dfd >= 0)
                    close(dfd);
                r = al_collect_add_skip(res, f->rel[0] ? f->rel : ".", "directory unreadable");
                goto pop;
            }
        }
        errno = 0;
        struct dirent *de = readdir(f->d);
        if (!de)
            goto pop;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        const char *bad = al_collect_name_problem(de->d_name);
        if (bad) {
            /* never copied, never descended into: only its escaped display
             * leaves the box, so no reading of the name can address a file */
            _cleanup_free_ char *shown = al_collect_name_escape(de->d_name);
            rel = shown ? join(f->rel, shown) : NULL;
            if (!rel) {
                r = -ENOMEM;
                break;
            }
            if (++entries > lim->max_entries) {
                if (!entries_capped)
                    r = add_cap_skip(res, rel, "entry limit reached: the rest of /out was not examined");
                entries_capped = true;
                break;
            }
            r = al_collect_add_skip(res, rel, bad);
            continue;
        }
        rel = join(f->rel, de->d_name);
        if (!rel) {
            r = -ENOMEM;
            break;
        }
        if (++entries > lim->max_entries) {
            if (!entries_capped)
                r = add_cap_skip(res, rel, "entry limit reached: the rest of /out was not examined");
            entries_capped = true;
            break;
        }
        struct stat st;
        if (AS_BOX(lim, fstatat(f->src, de->d_name, &st, AT_SYMLINK_NOFOLLOW)) < 0) {
            r = al_collect_add_skip(res, rel, "vanished");
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (f->depth + 1 > lim->max_depth) {
                r = add_cap_skip(res, rel, "deeper than the depth cap");
                continue;
            }
            int sub = AS_BOX(lim, al_openat_beneath(f->src, de->d_name, O_RDONLY | O_DIRECTORY, 0));
            if (sub < 0) {
                r = al_collect_add_skip(res, rel, "directory unreadable");
                continue;
            }
            int dsub = -1;
            if (f->dst >= 0) {
                if (mkdirat(f->dst, de->d_name, 0755) < 0 && errno != EEXIST) {
                    close(sub);
                    r = al_collect_add_skip(res, rel, "cannot create the directory on the host");
                    continue;
                }
                dsub = al_openat_beneath(f->dst, de->d_name, O_RDONLY | O_DIRECTORY, 0);
                if (dsub < 0) {
                    close(sub);
                    r = al_collect_add_skip(res, rel, "cannot open the directory on the host");
                    continue;
                }
            }
            stack[sp++] = (frame){ .src = sub, .dst = dsub, .rel = TAKE_PTR(rel), .depth = f->depth + 1 };
            continue;
        }
        if (!S_ISREG(st.st_mode)) {
            r = add_kind_skip(res, rel, type_name(st.st_mode), S_ISLNK(st.st_mode) ? AL_SKIP_LINK : AL_SKIP_SPECIAL);
            continue;
        }
        if (files >= lim->max_files) {
            r = add_cap_skip(res, rel, "artifact count cap reached");
            continue;
        }
        r = copy_one(f->src, f->dst, de->d_name, rel, &st, lim, &total, res);
        if (r == 1)
            files++;
        continue;
    pop:
        if (f->d)
            closedir(f->d);
        close(f->src);
        if (f->dst >= 0)
            close(f->dst);
        free(f->rel);
        sp--;
    }
    while (sp > 0) {
        frame *f = &stack[--sp];
        if (f->d)
            closedir(f->d);
        close(f->src);
        if (f->dst >= 0)
            close(f->dst);
        free(f->rel);
    }
    if (r < 0)
        return al_err(err, "collect", r, "collecting /out: %s", strerror(-r));
    /* readdir order is the tmpfs's; callers get a stable one */
    if (res->n_artifacts > 1)
        qsort(res->artifacts, res->n_artifacts, sizeof *res->artifacts, by_path);
    if (res->n_skipped > 1)
        qsort(res->skipped, res->n_skipped, sizeof *res->skipped, skip_by_path);
    return 0;
}
