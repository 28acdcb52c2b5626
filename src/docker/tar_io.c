/* Files in and out of the Docker box (container_int.h): the run's inputs
 * and the image's /tmp seed staged into /work and /tmp, and /out collected
 * back, with the native box's rules. Under runc straight into and out of
 * the container's own tmpfs, beneath its root; under gVisor as tar streams
 * through execs, by way of a tmpfs of our own.
 */
#include "container_int.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <linux/magic.h>
#include <linux/openat2.h>

#include "../box/collect.h"
#include "../box/stage.h"
#include "../box/untar.h"

/* bytes a tar of /out may take beyond its files: a header and padding per
 * entry, and the end blocks */
#define TAR_PER_ENTRY 1536

/* ---- our scratch tmpfs: staging and collection ---- */

int al_docker_scratch_mount(dbox *b, uint64_t bytes, al_error *err) {
    /* in a mount namespace of this process's own, so it is gone with us
     * whatever way we die */
    if (!b->unshared && unshare(CLONE_NEWNS) < 0)
        return al_err(err, "scratch", errno, "unshare(CLONE_NEWNS): %m");
    if (!b->unshared && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return al_err(err, "scratch", errno, "make mounts private: %m");
    b->unshared = true;
    snprintf(b->scratch, sizeof b->scratch, "/tmp/airlock-docker-XXXXXX");
    if (!mkdtemp(b->scratch)) {
        b->scratch[0] = '\0';
        return al_err(err, "scratch", errno, "mkdtemp: %m");
    }
    char opts[120];
    snprintf(opts, sizeof opts, "size=%llu,nr_inodes=%llu,mode=0700", (unsigned long long)bytes,
             (unsigned long long)(b->cfg->limits.tmpfs_inodes * 2 + b->cfg->limits.stage_files + 64));
    if (mount("airlock-docker", b->scratch, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) < 0)
        return al_err(err, "scratch", errno, "mount a tmpfs: %m");
    b->scratch_mounted = true;
    return 0;
}

void al_docker_scratch_unmount(dbox *b) {
    if (b->scratch_mounted)
        umount2(b->scratch, MNT_DETACH);
    if (b->scratch[0])
        rmdir(b->scratch);
    b->scratch_mounted = false;
    b->scratch[0] = '\0';
}

/* A subdirectory of the scratch, owned by OWNER. */
static int scratch_dir(dbox *b, const char *name, uid_t owner, al_error *err) {
    char p[200];
    snprintf(p, sizeof p, "%s/%s", b->scratch, name);
    if (mkdir(p, 0700) < 0 || chown(p, owner, owner) < 0)
        return al_err(err, "scratch", errno, "mkdir %s: %m", p);
    int fd = open(p, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    return fd < 0 ? al_err(err, "scratch", errno, "open %s: %m", p) : fd;
}

/* Write the tree at DIR (ours: regular files, directories) as a tar into a
 * memfd, with paths under PREFIX and owned by UID. */
static int pack(const char *dir, uid_t uid, al_error *err) {
    int mfd = memfd_create("airlock-stage", MFD_CLOEXEC);
    if (mfd < 0)
        return al_err(err, "stage", errno, "memfd_create: %m");
    struct archive *disk = archive_read_disk_new(), *w = archive_write_new();
    int r = 0;
    _cleanup_close_ int cwd = -1;
    if (!disk || !w) {
        r = al_err(err, "stage", ENOMEM, "libarchive");
        goto out;
    }
    archive_read_disk_set_symlink_physical(disk);
    archive_read_disk_set_behavior(disk, ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS | ARCHIVE_READDISK_NO_XATTR |
                                             ARCHIVE_READDISK_NO_ACL | ARCHIVE_READDISK_NO_FFLAGS);
    archive_write_set_format_pax_restricted(w);
    /* relative names: the tar holds work/... and tmp/... */
    cwd = open(".", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (cwd < 0 || chdir(dir) < 0) {
        r = al_err(err, "stage", errno, "chdir: %m");
        goto out;
    }
    if (archive_write_open_fd(w, mfd) != ARCHIVE_OK || archive_read_disk_open(disk, ".") != ARCHIVE_OK) {
        r = al_err(err, "stage", EIO, "libarchive: %s", archive_error_string(w) ?: archive_error_string(disk));
        goto out;
    }
    for (;;) {
        struct archive_entry *ent = archive_entry_new();
        int k = archive_read_next_header2(disk, ent);
        if (k == ARCHIVE_EOF) {
            archive_entry_free(ent);
            break;
        }
        if (k != ARCHIVE_OK) {
            archive_entry_free(ent);
            r = al_err(err, "stage", EIO, "read the stage: %s", archive_error_string(disk));
            break;
        }
        archive_read_disk_descend(disk);
        const char *pn = archive_entry_pathname(ent);
        if (strcmp(pn, ".") == 0) {
            archive_entry_free(ent);
            continue;
        }
        archive_entry_set_uid(ent, uid);
        archive_entry_set_gid(ent, uid);
        archive_entry_set_uname(ent, NULL);
        archive_entry_set_gname(ent, NULL);
        if (archive_write_header(w, ent) != ARCHIVE_OK) {
            r = al_err(err, "stage", EIO, "write the stage: %s", archive_error_string(w));
            archive_entry_free(ent);
            break;
        }
        if (archive_entry_filetype(ent) == AE_IFREG) {
            _cleanup_close_ int fd = open(archive_entry_sourcepath(ent) ?: pn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            char buf[65536];
            ssize_t n;
            while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
                archive_write_data(w, buf, (size_t)n);
        }
        archive_entry_free(ent);
    }
    if (archive_write_close(w) != ARCHIVE_OK && r == 0)
        r = al_err(err, "stage", EIO, "finish the stage: %s", archive_error_string(w));
out:
    if (cwd >= 0 && fchdir(cwd) < 0 && r == 0)
        r = al_err(err, "stage", errno, "fchdir: %m");
    if (disk)
        archive_read_free(disk);
    if (w)
        archive_write_free(w);
    if (r < 0) {
        close(mfd);
        return r;
    }
    lseek(mfd, 0, SEEK_SET);
    return mfd;
}

/* Under runc the container's tmpfs mounts are this host's: its root is
 * reached through its init's /proc/PID/root, by pidfd (the pid cannot have
 * been reused while the process it names is alive), and /work, /out, /tmp
 * are opened beneath it with no link followed and checked to be tmpfs. The
 * native box's staging and collection then apply as they are, with the
 * script's uid's file rights. (gVisor's mounts live in its Sentry: there
 * the tar streams below are the way.) */
int al_docker_open_root(dbox *b, al_error *err) {
    int pidfd = b->init_fd;
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/root", (int)b->init_pid);
    int fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return al_err(err, "docker", errno, "open the container's root: %m");
    struct pollfd pf = { .fd = pidfd, .events = POLLIN };
    if (poll(&pf, 1, 0) != 0) {
        close(fd);
        return al_err(err, "docker", ESRCH, "the container's init ended while its root was opened");
    }
    b->rootfd = fd;
    return 0;
}

int al_docker_open_scratch(dbox *b, const char *name, al_error *err) {
    struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
    int fd = (int)syscall(SYS_openat2, b->rootfd, name, &how, sizeof how);
    if (fd < 0)
        return al_err(err, "docker", errno, "open the container's /%s: %m", name);
    struct statfs sf;
    if (fstatfs(fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC) {
        close(fd);
        return al_err(err, "docker", EXDEV, "the container's /%s is not its tmpfs", name);
    }
    return fd;
}

/* The run's files and inputs into the directory OPEN_DIR gives for "work",
 * and the image's /tmp seed into the one for "tmp", with the native box's
 * staging rules and the script's uid's file rights: the container's own
 * tmpfs (runc) or our scratch, packed afterwards (gVisor). */
int al_docker_stage_into(dbox *b, int (*open_dir)(dbox *, const char *, al_error *), al_error *err) {
    const al_box_config *cfg = b->cfg;
    _cleanup_close_ int workfd = open_dir(b, "work", err);
    if (workfd < 0)
        return workfd;
    al_stage st = { .workfd = workfd, .uid = b->uid, .gid = b->uid, .max_files = cfg->limits.stage_files,
                    .max_bytes = cfg->limits.stage_bytes, .max_depth = cfg->limits.max_depth };
    int r = 0;
    for (size_t i = 0; r == 0 && i < cfg->n_files; i++)
        r = al_stage_data(&st, cfg->files[i].name, cfg->files[i].data, cfg->files[i].len, cfg->files[i].mode, err);
    for (size_t i = 0; r == 0 && i < cfg->n_inputs; i++)
        r = al_stage_path(&st, cfg->inputs[i], err);
    if (r == 0 && cfg->work_in) {
        /* a sandbox's home, as the native box stages it (box.c's
         * stage_all): its entries as /work's own, read beneath it with no
         * link followed, within the same staging caps; a file named as the
         * script is left where it is (the script's name is the box's) */
        const char *skip[8];
        size_t n = 0;
        for (size_t i = 0; i < cfg->n_files && n < ELEMENTSOF(skip); i++)
            skip[n++] = cfg->files[i].name;
        r = al_stage_dir_entries(&st, cfg->work_in, skip, n, err);
    }
    const al_runtime *rt = cfg->runtime;
    if (r == 0 && rt->tmp_seed && rt->tmp_seed_root) {
        _cleanup_close_ int tmpfd = open_dir(b, "tmp", err);
        if (tmpfd < 0)
            return tmpfd;
        al_stage ts = st;
        ts.workfd = tmpfd;
        ts.files = ts.bytes = 0;
        ts.max_bytes = cfg->limits.tmpfs_bytes;
        ts.max_files = cfg->limits.tmpfs_inodes;
        r = al_stage_beneath_as(&ts, rt->tmp_seed_root, rt->tmp_seed, rt->tmp_seed_name, err);
    }
    return r;
}

/* The native box's collection caps for this run, reading as UID. */
al_collect_limits al_docker_collect_limits(const dbox *b, uid_t uid) {
    const al_box_limits *l = &b->cfg->limits;
    return (al_collect_limits){
        .max_files = l->max_artifacts, .max_file_bytes = l->max_artifact_bytes,
        .max_total_bytes = l->max_artifacts_total, .max_depth = l->max_depth,
        .max_entries = l->max_artifacts * 10 + 1000, .uid = uid, .gid = uid,
    };
}

int al_docker_collect_direct(dbox *b, al_error *err) {
    _cleanup_close_ int outfd = al_docker_open_scratch(b, "out", err);
    if (outfd < 0)
        return outfd;
    al_collect_limits cl = al_docker_collect_limits(b, b->uid);
    return al_collect(outfd, b->cfg->out_dirfd, &cl, b->res, err);
}

static int scratch_box_dir(dbox *b, const char *name, al_error *err) { return scratch_dir(b, name, b->uid, err); }

int al_docker_stage(dbox *b, al_error *err) {
    int r = al_docker_stage_into(b, scratch_box_dir, err);
    if (r < 0)
        return r;
    _cleanup_close_ int tar = pack(b->scratch, b->uid, err);
    if (tar < 0)
        return tar;
    char *argv[] = { "tar", "-x", "-f", "-", "-C", "/", "--no-same-owner", "--no-overwrite-dir", NULL };
    r = al_docker_exec_tar(b, argv, tar, -1, 0, NULL, err);
    /* the staged copies are in the box now: their memory goes */
    al_docker_scratch_unmount(b);
    return r;
}

/* ---- collection: /out through tar, onto our tmpfs, then al_collect ---- */

/* What tar --ignore-failed-read left out ("tar: ./P: Warning: Cannot open:
 * Permission denied", a file the script made unreadable) is a skip, as the
 * native box's collection names it, never a silent loss. Past what its
 * kept stderr holds, "." says more may be left out. */
static void tar_unreadable(dbox *b, const char *dir, al_box_result *into) {
    bool full = strlen(b->tar_err) >= sizeof b->tar_err - 1;
    char *save = NULL;
    for (char *l = strtok_r(b->tar_err, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        al_untar_unreadable(l, into);
    if (full) {
        char why[96];
        snprintf(why, sizeof why, "the box's tar could not read more of /%s than it could name", dir);
        al_collect_add_skip(into, ".", why);
    }
}

int al_docker_tar_collect(dbox *b, const char *dir, const al_collect_limits *lim, int hostfd,
                          void (*before)(dbox *, int), al_box_result *into, al_error *err) {
    const al_box_limits *l = &b->cfg->limits;
    int r = al_docker_scratch_mount(b, l->tmpfs_bytes + (4u << 20), err);
    if (r < 0)
        return r;
    _cleanup_close_ int outfd = scratch_dir(b, dir, 0, err);
    _cleanup_close_ int mfd = outfd < 0 ? -1 : memfd_create("airlock-collect", MFD_CLOEXEC);
    char why[120], path[16];
    snprintf(path, sizeof path, "/%s", dir);
    if (outfd < 0) {
        r = outfd;
        goto out;
    }
    if (mfd < 0) {
        r = al_err(err, "collect", errno, "memfd_create: %m");
        goto out;
    }
    uint64_t max = l->tmpfs_bytes + l->tmpfs_inodes * TAR_PER_ENTRY + (1u << 20);
    bool too_big = false;
    /* everything under DIR, as tar finds it; no link followed (tar's default) */
    /* a file the script made unreadable (mode 000) is left out, not a
     * failure: collect would not read it on the native box either */
    char *targv[] = { "tar", "-c", "-f", "-", "--ignore-failed-read", "-C", path, ".", NULL };
    al_error terr = { 0 };
    r = al_docker_exec_tar(b, targv, -1, mfd, max, &too_big, &terr);
    if (r == -EIO) {
        /* tar itself failed on what the script left: whatever the script
         * can cause is the run's outcome, never airlock's error */
        snprintf(why, sizeof why, "%s could not be read whole: the box's tar failed", path);
        r = al_collect_add_skip(into, ".", why);
        r = r < 0 ? r : 1;
        goto out;
    }
    if (r < 0) {
        *err = terr;
        goto out;
    }
    if (too_big) {
        snprintf(why, sizeof why, "%s's tar exceeded its bound: the rest of %s was not examined", path, path);
        al_collect_add_skip(into, ".", why);
    }
    tar_unreadable(b, dir, into);
    lseek(mfd, 0, SEEK_SET);
    if ((r = al_untar(dir, lim, mfd, outfd, into, err)) < 0)
        goto out;
    if (before)
        before(b, outfd);
    /* extracted by us as root: read as root, beneath our own tmpfs */
    al_collect_limits cl = *lim;
    cl.uid = cl.gid = 0;
    r = al_collect(outfd, hostfd, &cl, into, err);
out:
    /* what it held is on the host now (or lost): its memory goes */
    if (outfd >= 0)
        close(outfd);
    outfd = -1;
    al_docker_scratch_unmount(b);
    return r;
}

int al_docker_collect(dbox *b, al_error *err) {
    al_collect_limits cl = al_docker_collect_limits(b, b->uid);
    int r = al_docker_tar_collect(b, "out", &cl, b->cfg->out_dirfd, NULL, b->res, err);
    return r < 0 ? r : 0;
}
