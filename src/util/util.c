#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

int al_err(al_error *err, const char *step, int errnum, const char *fmt, ...) {
    if (errnum < 0)
        errnum = -errnum;
    if (errnum == 0)
        errnum = EIO;
    /* The innermost failure names the step; outer layers keep it. */
    if (err && err->step[0] == '\0') {
        snprintf(err->step, sizeof err->step, "%s", step);
        err->err = errnum;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        /* messages end up in JSON answers and audit events: a name cut
         * inside a character, or bytes that are not UTF-8, would make the
         * whole answer fail to build */
        al_utf8_fix(err->msg);
    }
    return -errnum;
}

int al_parse_u64(const char *s, uint64_t *ret) {
    if (!s || !*s)
        return -EINVAL;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return -ERANGE;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *ret = v;
    return 0;
}

int al_parse_size(const char *s, uint64_t *ret_bytes) {
    if (!s || !*s)
        return -EINVAL;
    size_t n = strlen(s);
    uint64_t mult = 1;
    char last = s[n - 1];
    if (last == 'b' || last == 'B') {
        if (n < 2)
            return -EINVAL;
        n--;
        last = s[n - 1];
    }
    switch (last) {
    case 'k': case 'K': mult = 1ULL << 10; n--; break;
    case 'm': case 'M': mult = 1ULL << 20; n--; break;
    case 'g': case 'G': mult = 1ULL << 30; n--; break;
    case 't': case 'T': mult = 1ULL << 40; n--; break;
    default: break;
    }
    if (n == 0 || n > 20)
        return -EINVAL;
    char buf[24];
    memcpy(buf, s, n);
    buf[n] = '\0';
    uint64_t v;
    int r = al_parse_u64(buf, &v);
    if (r < 0)
        return r;
    if (v > UINT64_MAX / mult)
        return -ERANGE;
    *ret_bytes = v * mult;
    return 0;
}

int al_parse_millis(const char *s, uint64_t *ret_millis) {
    if (!s || !*s)
        return -EINVAL;
    const char *dot = strchr(s, '.');
    char whole[24];
    size_t wl = dot ? (size_t)(dot - s) : strlen(s);
    if (wl >= sizeof whole)
        return -ERANGE;
    memcpy(whole, s, wl);
    whole[wl] = '\0';
    uint64_t w = 0, frac = 0;
    if (wl > 0 && al_parse_u64(whole, &w) < 0)
        return -EINVAL;
    if (dot) {
        const char *f = dot + 1;
        size_t fl = strlen(f);
        if (fl == 0 || fl > 3 || (wl == 0 && fl == 0))
            return -EINVAL;
        uint64_t fv;
        if (al_parse_u64(f, &fv) < 0)
            return -EINVAL;
        for (size_t i = fl; i < 3; i++)
            fv *= 10;
        frac = fv;
    } else if (wl == 0) {
        return -EINVAL;
    }
    if (w > UINT64_MAX / 1000 - 1)
        return -ERANGE;
    *ret_millis = w * 1000 + frac;
    return 0;
}

uint64_t al_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int al_write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int al_read_small(int dirfd, const char *path, size_t max, char **ret_buf, size_t *ret_len) {
    _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    _cleanup_free_ char *buf = malloc(max + 1);
    if (!buf)
        return -ENOMEM;
    size_t len = 0;
    for (;;) {
        if (len == max)
            return -EFBIG;
        ssize_t r = read(fd, buf + len, max - len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    if (ret_len)
        *ret_len = len;
    *ret_buf = TAKE_PTR(buf);
    return 0;
}

int al_read_regular(int dirfd, const char *path, size_t max, bool nofollow, char **ret_buf, size_t *ret_len) {
    _cleanup_close_ int fd =
        openat(dirfd, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | (nofollow ? O_NOFOLLOW : 0));
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    if ((uint64_t)st.st_size > max)
        return -EFBIG;
    _cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        return -ENOMEM;
    size_t len = 0;
    while (len < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    if (ret_len)
        *ret_len = len;
    *ret_buf = TAKE_PTR(buf);
    return 0;
}

int al_write_str(int dirfd, const char *path, const char *s) {
    _cleanup_close_ int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -errno;
    return al_write_all(fd, s, strlen(s));
}

#include <sys/fsuid.h>

al_fsid al_fsid_enter(uid_t uid, gid_t gid) {
    al_fsid s = { setfsuid(uid), setfsgid(gid) };
    return s;
}

void al_fsid_leave(al_fsid saved) {
    setfsgid((gid_t)saved.gid);
    setfsuid((uid_t)saved.uid);
}

void al_rm_tree(int dirfd, const char *name) {
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
        return;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            al_rm_tree(fd, de->d_name);
    closedir(d);
    unlinkat(dirfd, name, AT_REMOVEDIR);
}

DIR *al_dir_open(int dfd) {
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    DIR *d = fdopendir(fd);
    if (!d) {
        int saved = errno;
        close(fd);
        errno = saved;
    }
    return d;
}

struct dirent *al_dir_next(DIR *d) {
    struct dirent *de;
    while ((de = readdir(d)) && (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0))
        ;
    return de;
}

size_t al_utf8_decode(const unsigned char *s, size_t n, uint32_t *ret_cp) {
    if (n == 0)
        return 0;
    if (s[0] < 0x80) {
        *ret_cp = s[0];
        return 1;
    }
    size_t len;
    uint32_t cp;
    if ((s[0] & 0xe0) == 0xc0) {
        len = 2;
        cp = s[0] & 0x1f;
    } else if ((s[0] & 0xf0) == 0xe0) {
        len = 3;
        cp = s[0] & 0x0f;
    } else if ((s[0] & 0xf8) == 0xf0) {
        len = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    /* overlong forms, surrogates, beyond U+10FFFF */
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    *ret_cp = cp;
    return len;
}

size_t al_utf8_seq(const unsigned char *s, size_t n) {
    uint32_t cp;
    return al_utf8_decode(s, n, &cp);
}

size_t al_utf8_cut(const char *s, size_t len, size_t max) {
    if (len <= max)
        return len;
    /* s[max] is the first byte left out: a continuation byte there means
     * the cut is inside a character (at most 3 bytes back to its start) */
    size_t n = max;
    while (n > 0 && max - n < 3 && ((unsigned char)s[n] & 0xc0) == 0x80)
        n--;
    return ((unsigned char)s[n] & 0xc0) == 0x80 ? max : n;
}

size_t al_utf8_scrub(char *s, size_t len) {
    unsigned char *u = (unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t k = al_utf8_seq(u + i, len - i);
        if (k)
            i += k;
        else
            u[i++] = '?';
    }
    return len;
}

char *al_utf8_fix(char *s) {
    unsigned char *u = (unsigned char *)s;
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        size_t k = al_utf8_seq(u + i, len - i);
        if (k) {
            i += k;
            continue;
        }
        /* a lead byte whose continuation bytes run to the end, short of a
         * whole character: the end of a cut string */
        size_t want = (u[i] & 0xe0) == 0xc0 ? 2 : (u[i] & 0xf0) == 0xe0 ? 3 : (u[i] & 0xf8) == 0xf0 ? 4 : 0;
        bool tail = want && len - i < want;
        for (size_t j = i + 1; tail && j < len; j++)
            tail = (u[j] & 0xc0) == 0x80;
        if (tail) {
            u[i] = '\0';
            break;
        }
        u[i++] = '?';
    }
    return s;
}

size_t al_buf_write(char *p, size_t size, size_t n, void *userdata) {
    al_buf *b = userdata;
    size_t k = size * n;
    if (b->len + k > b->max) {
        b->over = true;
        return 0;
    }
    char *nb = realloc(b->buf, b->len + k + 1);
    if (!nb)
        return 0;
    memcpy(nb + b->len, p, k);
    b->buf = nb;
    b->len += k;
    b->buf[b->len] = '\0';
    return k;
}

int al_name_index(const char *const *names, size_t n, const char *name) {
    for (size_t i = 0; name && i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0)
            return (int)i;
    return -1;
}

int al_openat_beneath(int dirfd, const char *name, int flags, mode_t mode) {
    /* openat2 refuses O_NOCTTY beside O_PATH */
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW | ((flags & O_PATH) ? 0 : O_NOCTTY)),
        .mode = (flags & O_CREAT) ? mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    /* bounded: a tree renamed in a loop under us costs a few tries, then -EAGAIN */
    for (int tries = 0; tries < 8; tries++) {
        long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof how);
        if (fd >= 0)
            return (int)fd;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
    }
    return -EAGAIN;
}
