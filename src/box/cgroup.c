#include "cgroup.h"

#include <dirent.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <time.h>

int al_cgroup_write(const char *dir, const char *file, const char *value) {
    char path[512];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path)
        return -ENAMETOOLONG;
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    ssize_t w = write(fd, value, strlen(value));
    if (w < 0)
        return -errno;
    return 0;
}

/* MAX: cgroup.procs lists up to pids.max processes; a counter or a flat-keyed
 * file (memory.events, cpu.stat) is a few hundred bytes, and a buffer that
 * small comes from the heap, not from an mmap and munmap per read. */
#define SMALL_FILE_MAX (16 << 10)
static int read_file(const char *dir, const char *file, size_t max, char **ret) {
    char path[512];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path)
        return -ENAMETOOLONG;
    return al_read_small(AT_FDCWD, path, max, ret, NULL);
}

int al_cgroup_read_u64(const char *dir, const char *file, uint64_t *ret) {
    _cleanup_free_ char *buf = NULL;
    int r = read_file(dir, file, SMALL_FILE_MAX, &buf);
    if (r < 0)
        return r;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || end == buf)
        return -EINVAL;
    *ret = v;
    return 0;
}

int al_cgroup_parse_key(const char *text, const char *key, uint64_t *ret) {
    size_t kl = strlen(key);
    for (const char *line = text; line && *line;) {
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ') {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(line + kl + 1, &end, 10);
            if (errno || end == line + kl + 1)
                return -EINVAL;
            *ret = v;
            return 0;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return -ENOENT;
}

int al_cgroup_read_key(const char *dir, const char *file, const char *key, uint64_t *ret) {
    _cleanup_free_ char *buf = NULL;
    int r = read_file(dir, file, SMALL_FILE_MAX, &buf);
    if (r < 0)
        return r;
    return al_cgroup_parse_key(buf, key, ret);
}

/* Counted as it is read, through a buffer on the stack: this runs at the
 * end of every box (is it empty?) and in every wait for one to empty. */
int al_cgroup_count_procs(const char *dir) {
    char path[512];
    if (snprintf(path, sizeof path, "%s/cgroup.procs", dir) >= (int)sizeof path)
        return -ENAMETOOLONG;
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    char buf[4096];
    int n = 0;
    for (;;) {
        ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        if (k == 0)
            return n;
        for (ssize_t i = 0; i < k; i++)
            n += buf[i] == '\n';
    }
}

int al_cgroup_kill_listed(const char *dir) {
    _cleanup_free_ char *buf = NULL;
    int r = read_file(dir, "cgroup.procs", 1 << 20, &buf);
    if (r < 0)
        return r;
    for (char *p = buf; *p;) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 1)
            kill((pid_t)pid, SIGKILL);
        p = end;
        while (*p == '\n')
            p++;
    }
    return 0;
}

int al_cgroup_wait_empty(const al_cgroup_ops *ops, al_cgroup *cg, uint64_t timeout_ms) {
    uint64_t deadline = al_now_ms() + timeout_ms;
    for (;;) {
        int n = ops->nprocs(cg);
        if (n <= 0)
            return n;
        if (al_now_ms() >= deadline)
            return -EBUSY;
        ops->kill_all(cg);
        struct timespec ts = { 0, 2 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

const al_cgroup_ops *al_cgroup_pick(al_cgroup_caps *caps) {
    const char *want = getenv("AIRLOCK_CGROUP");
    memset(caps, 0, sizeof *caps);
    caps->version = "none";
    if (want && strcmp(want, "none") == 0) {
        snprintf(caps->why_not, sizeof caps->why_not, "disabled by AIRLOCK_CGROUP=none");
        return NULL;
    }
    const al_cgroup_ops *order[2] = { &al_cgroup_v2_ops, &al_cgroup_v1_ops };
    for (size_t i = 0; i < ELEMENTSOF(order); i++) {
        if (want && strcmp(want, order[i]->version) != 0)
            continue;
        al_cgroup_caps c = { .version = order[i]->version };
        if (order[i]->detect(&c) == 0) {
            *caps = c;
            return order[i];
        }
        /* keep the reason of the last backend tried */
        snprintf(caps->why_not, sizeof caps->why_not, "%s", c.why_not);
    }
    return NULL;
}

int al_cgroup_mkdir_fresh(const char *dir) {
    if (mkdir(dir, 0755) == 0)
        return 0;
    if (errno != EEXIST)
        return -errno;
    for (int i = 0; i < 100; i++) {
        al_cgroup_kill_listed(dir);
        if (rmdir(dir) == 0 || errno == ENOENT)
            break;
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return mkdir(dir, 0755) < 0 ? -errno : 0;
}

void al_cgroup_sweep_dir(const char *base, bool (*stale)(const char *name, int *hold)) {
    DIR *d = opendir(base);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        /* what says it is stale stays held (its uid's lock) until it is
         * gone: a box given that uid meanwhile would be killed with it */
        _cleanup_close_ int hold = -1;
        if (strncmp(de->d_name, "box-", 4) != 0 || !stale(de->d_name, &hold))
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", base, de->d_name);
        for (int i = 0; i < 50; i++) {
            al_cgroup_kill_listed(p);
            if (rmdir(p) == 0 || errno == ENOENT)
                break;
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    closedir(d);
}

/* Whether the comma-separated LIST holds NAME. */
static bool list_has(const char *list, size_t len, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list, *end = list + len; p < end;) {
        size_t l = strcspn(p, ",");
        if (l > (size_t)(end - p))
            l = (size_t)(end - p);
        if (l == n && memcmp(p, name, n) == 0)
            return true;
        p += l + 1;
    }
    return false;
}

/* PATH as a parent: absolute, no "." or ".." segment, "" for the root. */
static int parent_path(const char *path, size_t plen, char *buf, size_t len) {
    if (plen == 0 || path[0] != '/' || plen >= len)
        return -EINVAL;
    for (const char *p = path; p < path + plen;) {
        p++;
        size_t l = strcspn(p, "/\n");
        if ((l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.'))
            return -EINVAL;
        p += l;
    }
    while (plen > 0 && path[plen - 1] == '/')
        plen--;
    memcpy(buf, path, plen);
    buf[plen] = '\0';
    return 0;
}

int al_cgroup_parent(const char *ctl, char *buf, size_t len) {
    const char *want = getenv("AIRLOCK_CGROUP_PARENT");
    if (!want || !*want) {
        buf[0] = '\0';
        return 0;
    }
    if (strcmp(want, "self") != 0)
        return parent_path(want, strlen(want), buf, len);
    _cleanup_free_ char *text = NULL;
    int r = al_read_small(AT_FDCWD, "/proc/self/cgroup", 64 << 10, &text, NULL);
    if (r < 0)
        return r;
    /* "ID:CONTROLLERS:PATH" a line; v2's is "0::PATH" */
    for (char *line = text; *line;) {
        size_t l = strcspn(line, "\n");
        char *c1 = memchr(line, ':', l);
        char *c2 = c1 ? memchr(c1 + 1, ':', l - (size_t)(c1 + 1 - line)) : NULL;
        if (c2) {
            bool match = ctl ? list_has(c1 + 1, (size_t)(c2 - c1 - 1), ctl)
                             : c1 == line + 1 && line[0] == '0' && c2 == c1 + 1;
            if (match)
                return parent_path(c2 + 1, l - (size_t)(c2 + 1 - line), buf, len);
        }
        line += l + (line[l] == '\n');
    }
    return -EINVAL;
}

