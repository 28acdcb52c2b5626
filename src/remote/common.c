/* What both remote drivers share (remote_int.h), below them both: the run's output kept
 * and passed on, its command line, its stop, and the collection of the
 * remote /out under the same caps and name rules as a local box's. */
#include "remote_int.h"

#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nettle/sha2.h>

#include "../box/collect.h"
#include "../util/hash.h"

const char *al_remote_kind_name(al_remote_kind k) {
    static const char *const names[] = { [AL_REMOTE_E2B] = "e2b", [AL_REMOTE_DAYTONA] = "daytona" };
    return k < _AL_REMOTE_KIND_MAX ? names[k] : "?";
}

int al_remote_kind_from_name(const char *name, al_remote_kind *ret) {
    for (int k = 0; k < _AL_REMOTE_KIND_MAX; k++)
        if (strcmp(name, al_remote_kind_name((al_remote_kind)k)) == 0) {
            *ret = (al_remote_kind)k;
            return 0;
        }
    return -EINVAL;
}

int al_remote_steps(const al_remote_ops *ops, void *b, const al_box_config *cfg, al_box_result *res) {
    memset(res, 0, sizeof *res);
    res->exit_code = -1;
    snprintf(res->driver, sizeof res->driver, "%s", al_remote_kind_name(ops->kind));
    al_remote_controls(ops->kind, &res->controls);
    al_error err = { 0 };
    int r = ops->open(b, &err);
    if (r == 0)
        r = ops->prepare(b, &err);
    if (r == 0 && cfg->out_dirfd >= 0 && res->reason != AL_REASON_CANCELED) {
        al_remote_listing l = { 0 };
        r = ops->list_out(b, &l, &err);
        if (r == 0)
            r = al_remote_collect(&l, cfg->out_dirfd, &cfg->limits, ops->download, b, res, &err);
        al_remote_listing_free(&l);
    }
    ops->finish(b);
    if (r < 0 && ops->canceled(b)) {
        res->reason = AL_REASON_CANCELED;
        return 0;
    }
    if (r < 0) {
        res->reason = AL_REASON_ERROR;
        res->error = err;
    }
    return r < 0 ? r : 0;
}

bool al_remote_tag_stale(const char *tag, const char *prefix, const char *keep) {
    return tag && strncmp(tag, prefix, strlen(prefix)) == 0 && strncmp(tag, keep, strlen(keep)) != 0;
}

int al_remote_listing_add(al_remote_listing *l, const char *path, bool dir, bool file, uint64_t size) {
    al_remote_entry *n = realloc(l->e, (l->n + 1) * sizeof *n);
    if (!n)
        return -ENOMEM;
    l->e = n;
    if (!(n[l->n].path = strdup(path)))
        return -ENOMEM;
    n[l->n].dir = dir;
    n[l->n].file = file;
    n[l->n].size = size;
    l->n++;
    return 0;
}

void al_remote_listing_free(al_remote_listing *l) {
    for (size_t i = 0; i < l->n; i++)
        free(l->e[i].path);
    free(l->e);
    *l = (al_remote_listing){ 0 };
}

/* S quoted for bash: in single quotes, each ' as '\'' */
static int quote(al_buf *b, const char *s) {
    size_t need = 3 + strlen(s) * 4;
    char *n = realloc(b->buf, b->len + need + 1);
    if (!n)
        return -ENOMEM;
    b->buf = n;
    n[b->len++] = ' ';
    n[b->len++] = '\'';
    for (; *s; s++) {
        if (*s == '\'') {
            memcpy(n + b->len, "'\\''", 4);
            b->len += 4;
        } else {
            n[b->len++] = *s;
        }
    }
    n[b->len++] = '\'';
    n[b->len] = '\0';
    return 0;
}

char *al_remote_command(const al_box_config *cfg, const char *stdin_name) {
    al_buf b = { 0 };
    /* the interpreter by its name, as the cloud's image has it on PATH
     * (argv[0] is the airlock image's absolute path) */
    const char *interp = cfg->argv[0];
    const char *slash = strrchr(interp, '/');
    int r = 0;
    if (!(b.buf = strdup("cd /work && exec")))
        return NULL;
    b.len = strlen(b.buf);
    r = quote(&b, slash ? slash + 1 : interp);
    for (size_t i = 1; r == 0 && cfg->argv[i]; i++)
        r = quote(&b, cfg->argv[i]);
    if (r == 0) {
        const char *in = stdin_name ? stdin_name : "/dev/null";
        char *n = realloc(b.buf, b.len + strlen(in) + 8);
        if (!n)
            r = -ENOMEM;
        else {
            b.buf = n;
            b.len += (size_t)sprintf(n + b.len, " <%s", stdin_name ? "" : in);
            if (stdin_name && quote(&b, stdin_name) < 0)
                r = -ENOMEM;
        }
    }
    if (r < 0) {
        free(b.buf);
        return NULL;
    }
    return b.buf;
}

bool al_remote_should_stop(const al_box_config *cfg, uint64_t deadline_ms, bool *canceled) {
    if (cfg->cancel_fd >= 0) {
        struct pollfd p = { .fd = cfg->cancel_fd, .events = POLLIN };
        if (poll(&p, 1, 0) > 0) {
            *canceled = true;
            return true;
        }
    }
    return deadline_ms && al_now_ms() >= deadline_ms;
}

/* ---- the remote /out, collected ---- */

typedef struct sink {
    int fd;
    uint64_t got, cap;
    struct sha256_ctx md;
    bool over, failed;
} sink;

static size_t sink_write(char *p, size_t size, size_t n, void *ud) {
    sink *s = ud;
    size_t k = size * n;
    /* caps hold on the bytes that came, not on what the listing said */
    if (s->got + k > s->cap) {
        s->over = true;
        return 0;
    }
    s->got += k;
    sha256_update(&s->md, k, (const uint8_t *)p);
    if (al_write_all(s->fd, p, k) < 0) {
        s->failed = true;
        return 0;
    }
    return k;
}

/* REL's parent directories made beneath DIRFD, one component at a time,
 * none followed if a link: the fd of the last (or a dup of DIRFD), and in
 * *LEAF the file's own name; -errno. */
static int parents(int dirfd, char *rel, const char **leaf) {
    int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    char *seg = rel, *slash;
    while (fd >= 0 && (slash = strchr(seg, '/'))) {
        *slash = '\0';
        int next = -1;
        if (mkdirat(fd, seg, 0755) == 0 || errno == EEXIST)
            next = al_openat_beneath(fd, seg, O_RDONLY | O_DIRECTORY, 0);
        *slash = '/';
        close(fd);
        fd = next;
        seg = slash + 1;
    }
    *leaf = seg;
    return fd < 0 ? -EIO : fd;
}

/* Why the remote path REL is not collected as it stands (a name /out's
 * rules refuse, or one no local file could have), or NULL. */
static const char *path_problem(const char *rel, uint64_t *depth) {
    _cleanup_free_ char *copy = strdup(rel);
    if (!copy)
        return "out of memory";
    *depth = 0;
    char *save = NULL;
    for (char *seg = strtok_r(copy, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
        (*depth)++;
        if (strcmp(seg, ".") == 0 || strcmp(seg, "..") == 0)
            return "not a name";
        const char *bad = al_collect_name_problem(seg);
        if (bad)
            return bad;
    }
    return *depth ? NULL : "not a name";
}

static int collect_one(const al_remote_entry *e, int out_dirfd, const al_box_limits *lim, uint64_t *total,
                       al_remote_download_fn dl, void *ud, al_box_result *res) {
    char why[200];
    if (e->size > lim->max_artifact_bytes) {
        snprintf(why, sizeof why, "larger than the per-file cap (%llu > %llu bytes)", (unsigned long long)e->size,
                 (unsigned long long)lim->max_artifact_bytes);
        return al_collect_add_skip(res, e->path, why);
    }
    if (*total + e->size > lim->max_artifacts_total) {
        snprintf(why, sizeof why, "total artifact cap reached (%llu bytes)",
                 (unsigned long long)lim->max_artifacts_total);
        return al_collect_add_skip(res, e->path, why);
    }
    _cleanup_free_ char *rel = strdup(e->path);
    if (!rel)
        return -ENOMEM;
    const char *leaf;
    _cleanup_close_ int dir = parents(out_dirfd, rel, &leaf);
    if (dir < 0)
        return al_collect_add_skip(res, e->path, "cannot create the directory on the host");
    sink s = { .cap = lim->max_artifact_bytes };
    if (*total + s.cap > lim->max_artifacts_total)
        s.cap = lim->max_artifacts_total - *total;
    s.fd = al_openat_beneath(dir, leaf, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (s.fd < 0) {
        snprintf(why, sizeof why, "cannot write on the host: %s", strerror(-s.fd));
        return al_collect_add_skip(res, e->path, why);
    }
    fchmod(s.fd, 0644);
    sha256_init(&s.md);
    al_error err = { 0 };
    int r = dl(ud, e->path, sink_write, &s, &err);
    close(s.fd);
    if (r < 0 || s.over || s.failed) {
        unlinkat(dir, leaf, 0);
        if (s.over)
            return al_collect_add_skip(res, e->path, "grew past the cap while being read");
        snprintf(why, sizeof why, "download failed: %.150s", s.failed ? "cannot write on the host" : err.msg);
        return al_collect_add_skip(res, e->path, why);
    }
    char hex[65];
    al_sha256_finish_hex(&s.md, hex);
    *total += s.got;
    al_artifact *n = realloc(res->artifacts, (res->n_artifacts + 1) * sizeof *n);
    if (!n)
        return -ENOMEM;
    res->artifacts = n;
    if (!(n[res->n_artifacts].path = strdup(e->path)))
        return -ENOMEM;
    n[res->n_artifacts].size = s.got;
    memcpy(n[res->n_artifacts].sha256, hex, 65);
    res->n_artifacts++;
    return 1;
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const al_remote_entry *)a)->path, ((const al_remote_entry *)b)->path);
}

int al_remote_collect(al_remote_listing *l, int out_dirfd, const al_box_limits *lim, al_remote_download_fn dl,
                      void *ud, al_box_result *res, al_error *err) {
    uint64_t files = 0, total = 0, max_entries = lim->max_artifacts * 10 + 1000;
    /* in the order of their names, whatever order the service listed them
     * in: which files a cap leaves out does not depend on it */
    if (l->n > 1)
        qsort(l->e, l->n, sizeof *l->e, by_path);
    for (size_t i = 0; i < l->n; i++) {
        const al_remote_entry *e = &l->e[i];
        int r = 0;
        uint64_t depth = 0;
        const char *bad = path_problem(e->path, &depth);
        if (i >= max_entries) {
            r = al_collect_add_skip(res, e->path, "entry limit reached: the rest of /out was not examined");
            if (r == 0)
                break;
        } else if (bad) {
            /* only its escaped display is kept: no reading of the name
             * can address a file here */
            _cleanup_free_ char *shown = al_collect_name_escape(e->path);
            r = shown ? al_collect_add_skip(res, shown, bad) : -ENOMEM;
        } else if (depth > lim->max_depth + (e->dir ? 0 : 1)) {
            r = al_collect_add_skip(res, e->path, "deeper than the depth cap");
        } else if (e->dir) {
            continue;
        } else if (!e->file) {
            r = al_collect_add_skip(res, e->path, "not a regular file");
        } else if (files >= lim->max_artifacts) {
            r = al_collect_add_skip(res, e->path, "artifact count cap reached");
        } else if ((r = collect_one(e, out_dirfd, lim, &total, dl, ud, res)) == 1) {
            files++;
            r = 0;
        }
        if (r < 0)
            return al_err(err, "collect", -r, "out of memory");
    }
    return 0;
}
