/*
 * The host runtime: the host's own /usr, read-only, with a generated
 * minimal /etc. Nothing to build, so `airlock run` works on a fresh machine.
 */
#include "runtime.h"

#include <fcntl.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>

#include "mount.h"

#define RO_ATTRS (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)

static const char passwd[] =
    "nobody:x:65534:65534:airlock sandbox:/tmp:/usr/sbin/nologin\n";
static const char group[] = "nogroup:x:65534:\n";
static const char hosts[] = "127.0.0.1\tlocalhost airlock\n::1\tlocalhost ip6-localhost ip6-loopback\n";
static const char nsswitch[] = "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\n";

/* Host /etc entries bound read-only when present: CA certificates, the
 * alternatives links many /usr/bin entries point through, and fonts. */
static const char *const etc_binds[] = { "ssl/certs", "alternatives", "fonts" };

/* A host file of at most MAX bytes copied into the box's /etc, kernel to
 * kernel (no buffer of MAX bytes in between); a link is followed, to a file
 * of the box's own tmpfs. */
static int copy_file(int from_dir, const char *from, int to_dir, const char *to, size_t max) {
    _cleanup_close_ int in = openat(from_dir, from, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (in < 0 || fstat(in, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode) || (size_t)st.st_size > max)
        return -EFBIG;
    _cleanup_close_ int fd = openat(to_dir, to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -errno;
    for (off_t left = st.st_size; left > 0;) {
        ssize_t n = sendfile(fd, in, NULL, (size_t)left);
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        left -= n;
    }
    return 0;
}

static int mkdir_p(int dirfd, const char *rel) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", rel);
    for (char *p = buf;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdirat(dirfd, buf, 0755) < 0 && errno != EEXIST)
                return -errno;
            if (c == '\0')
                return 0;
            *p = c;
        }
    }
}

static int bind_into(int rootfd, const char *host, const char *rel, bool own_inodes, al_error *err) {
    struct stat st;
    if (stat(host, &st) < 0)
        return 0; /* optional on this host */
    if (S_ISDIR(st.st_mode)) {
        if (mkdir_p(rootfd, rel) < 0)
            return al_err(err, "runtime", errno, "mkdir /%s: %m", rel);
    } else {
        _cleanup_close_ int f = openat(rootfd, rel, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (f < 0)
            return al_err(err, "runtime", errno, "create /%s: %m", rel);
    }
    if (own_inodes)
        return al_mount_own_tree(AT_FDCWD, host, RO_ATTRS, rootfd, rel, err);
    _cleanup_close_ int m = al_mount_bind(host, RO_ATTRS, err);
    if (m < 0)
        return m;
    return al_mount_attach(m, rootfd, rel, err);
}

static int host_populate(const al_runtime *rt, int srcfd, int rootfd, bool own_inodes, al_error *err) {
    int r = bind_into(rootfd, "/usr", "usr", own_inodes, err);
    if (r < 0)
        return r;
    /* merged-/usr hosts have /bin -> usr/bin and so on: make the same links;
     * a host where they are real directories gets them bound read-only. */
    static const char *const top[] = { "bin", "lib", "lib32", "lib64", "libx32", "sbin" };
    for (size_t i = 0; i < ELEMENTSOF(top); i++) {
        char host[64], target[256];
        snprintf(host, sizeof host, "/%s", top[i]);
        ssize_t n = readlink(host, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            if (symlinkat(target, rootfd, top[i]) < 0)
                return al_err(err, "runtime", errno, "link /%s: %m", top[i]);
        } else if (access(host, F_OK) == 0) {
            if ((r = bind_into(rootfd, host, top[i], own_inodes, err)) < 0)
                return r;
        }
    }

    if (mkdirat(rootfd, "etc", 0755) < 0)
        return al_err(err, "runtime", errno, "mkdir /etc: %m");
    _cleanup_close_ int etc = openat(rootfd, "etc", O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (etc < 0)
        return al_err(err, "runtime", errno, "open /etc: %m");
    struct { const char *name, *text; } gen[] = {
        { "passwd", passwd }, { "group", group }, { "hosts", hosts },
        { "nsswitch.conf", nsswitch }, { "hostname", "airlock\n" },
        /* offline: no resolver at all, so a lookup fails at once */
        { "resolv.conf", "" },
    };
    for (size_t i = 0; i < ELEMENTSOF(gen); i++)
        if ((r = al_write_str(etc, gen[i].name, gen[i].text)) < 0)
            return al_err(err, "runtime", r, "write /etc/%s: %s", gen[i].name, strerror(-r));
    _cleanup_close_ int hostetc = open("/etc", O_DIRECTORY | O_CLOEXEC);
    /* The loader's cache (40 KiB here) is copied, not bound: a bind was
     * the host's inode, whose every open by any process on the host (each
     * dynamically linked exec) a box could watch, and an overlay needs a
     * directory. Copied kernel to kernel it costs some 20 us (through a
     * 16 MiB buffer it was 0.15 ms). So is localtime, a link into
     * /usr/share/zoneinfo. Both optional. */
    if (hostetc >= 0) {
        copy_file(hostetc, "ld.so.cache", etc, "ld.so.cache", 16 << 20);
        copy_file(hostetc, "localtime", etc, "localtime", 64 << 10);
    }
    for (size_t i = 0; i < ELEMENTSOF(etc_binds); i++) {
        char host[128], rel[128];
        snprintf(host, sizeof host, "/etc/%s", etc_binds[i]);
        snprintf(rel, sizeof rel, "etc/%s", etc_binds[i]);
        if ((r = bind_into(rootfd, host, rel, own_inodes, err)) < 0)
            return r;
    }
    (void)rt;
    (void)srcfd;
    return 0;
}

const al_runtime al_runtime_host = {
    .name = "host",
    .digest = NULL,
    .populate = host_populate,
    .data = NULL,
};
