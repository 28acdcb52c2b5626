#include "uidpool.h"

#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

/*
 * A uid is reserved by holding an flock on /run/airlock/uids/<uid>: the
 * kernel drops it when the holder dies, so a crashed run never leaks its
 * uid. Probing from the bottom keeps the lock files as few as the most
 * boxes ever run at once.
 */
int al_uid_acquire(uid_t *ret_uid, int *ret_lockfd, al_error *err) {
    const char *dir = getenv("AIRLOCK_UID_LOCKS");
    if (!dir)
        dir = "/run/airlock/uids";
    if (mkdir("/run/airlock", 0700) < 0 && errno != EEXIST)
        return al_err(err, "uid", errno, "mkdir /run/airlock: %m");
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return al_err(err, "uid", errno, "mkdir %s: %m", dir);
    _cleanup_close_ int dfd = open(dir, O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0)
        return al_err(err, "uid", errno, "open %s: %m", dir);
    for (uint32_t i = 0; i < AL_UID_COUNT; i++) {
        uid_t uid = AL_UID_BASE + i;
        char name[16];
        snprintf(name, sizeof name, "%u", (unsigned)uid);
        int fd = openat(dfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
            return al_err(err, "uid", errno, "open %s/%s: %m", dir, name);
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            *ret_uid = uid;
            *ret_lockfd = fd;
            return 0;
        }
        close(fd);
    }
    return al_err(err, "uid", EAGAIN, "no free host uid for a box in %s", dir);
}

static void lock_path(uid_t uid, char *p, size_t n) {
    const char *dir = getenv("AIRLOCK_UID_LOCKS");
    snprintf(p, n, "%s/%u", dir ? dir : "/run/airlock/uids", (unsigned)uid);
}

bool al_uid_lock_is(int fd, uid_t uid) {
    char p[4096];
    lock_path(uid, p, sizeof p);
    struct stat a, b;
    return fstat(fd, &a) == 0 && lstat(p, &b) == 0 && S_ISREG(a.st_mode) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int al_uid_lock_if_free(uid_t uid) {
    char p[4096];
    lock_path(uid, p, sizeof p);
    /* created if missing, as al_uid_acquire would: the one who locks the
     * file, whoever made it, is the uid's only holder */
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

bool al_uid_is_free(uid_t uid) {
    int fd = al_uid_lock_if_free(uid);
    if (fd == -ENOENT)
        return true; /* no lock directory: nobody ever held it */
    if (fd < 0)
        return false;
    close(fd);
    return true;
}
