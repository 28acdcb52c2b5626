/* An airlock image in Docker: loaded from the image's own tree on first
 * use (POST /images/create?fromSrc=-, a tar stream of the tree; no
 * registry), tagged airlock-image:<digest>, labelled with the digest, and
 * that label checked each time it is used. */
#include "docker.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define REPO "airlock-image"
#define LABEL_DIGEST "dev.airlock.digest"

/* The image's id when the daemon holds ours: 1 yes, 0 not loaded, -errno. */
static int find(al_engine *e, const char *digest, char ret_id[80], al_error *err) {
    char path[200];
    snprintf(path, sizeof path, "/images/" REPO ":%s/json", digest);
    json_t *ins = NULL;
    int st = al_engine_call(e, "GET", path, NULL, &ins, err);
    if (st == 404) {
        json_decref(ins);
        memset(err, 0, sizeof *err);
        return 0;
    }
    if (st < 0 || st != 200) {
        json_decref(ins);
        return st < 0 ? st : -EIO;
    }
    const char *id = json_string_value(json_object_get(ins, "Id"));
    const char *label = json_string_value(json_object_get(json_object_get(json_object_get(ins, "Config"), "Labels"),
                                                          LABEL_DIGEST));
    int r = 1;
    if (!label || strcmp(label, digest) != 0)
        r = al_err(err, "image", EBADMSG,
                   "the daemon's " REPO ":%.12s is not airlock's image %.12s (its label says %s): remove it "
                   "(docker rmi) and airlock loads its own again", digest, digest, label ? label : "nothing");
    else if (!id || strlen(id) >= 80)
        r = al_err(err, "image", EIO, "the daemon named no image id");
    else
        snprintf(ret_id, 80, "%s", id);
    json_decref(ins);
    return r;
}

/* In a child: the tree at ROOT as a tar on FD. Root-owned, airlock's own
 * tree (built or imported by airlock image): links are archived as links,
 * never followed; no mount is crossed. */
static _Noreturn void write_tree(const char *root, int fd) {
    struct archive *disk = archive_read_disk_new(), *w = archive_write_new();
    if (!disk || !w || chdir(root) < 0)
        _exit(1);
    archive_read_disk_set_symlink_physical(disk);
    archive_read_disk_set_behavior(disk, ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS | ARCHIVE_READDISK_NO_XATTR |
                                             ARCHIVE_READDISK_NO_ACL | ARCHIVE_READDISK_NO_FFLAGS);
    archive_write_set_format_pax_restricted(w);
    if (archive_write_open_fd(w, fd) != ARCHIVE_OK || archive_read_disk_open(disk, ".") != ARCHIVE_OK)
        _exit(1);
    for (;;) {
        struct archive_entry *ent = archive_entry_new();
        int k = archive_read_next_header2(disk, ent);
        if (k == ARCHIVE_EOF)
            break;
        if (k != ARCHIVE_OK && k != ARCHIVE_WARN)
            _exit(2);
        archive_read_disk_descend(disk);
        if (archive_write_header(w, ent) < ARCHIVE_WARN)
            _exit(3);
        if (archive_entry_filetype(ent) == AE_IFREG && archive_entry_size(ent) > 0) {
            int in = open(archive_entry_sourcepath(ent), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            if (in < 0)
                _exit(4);
            char buf[1 << 16];
            ssize_t n;
            while ((n = read(in, buf, sizeof buf)) > 0)
                if (archive_write_data(w, buf, (size_t)n) < 0)
                    _exit(5);
            close(in);
        }
        archive_entry_free(ent);
    }
    if (archive_write_close(w) != ARCHIVE_OK)
        _exit(6);
    _exit(0);
}

static int load(al_engine *e, const char *root, const char *digest, al_error *err) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return al_err(err, "image", errno, "pipe: %m");
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return al_err(err, "image", errno, "fork: %m");
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(p[0]);
        write_tree(root, p[1]);
    }
    close(p[1]);
    char path[400];
    snprintf(path, sizeof path,
             "/images/create?fromSrc=-&repo=" REPO "&tag=%s&message=airlock%%20image&changes=LABEL%%20" LABEL_DIGEST
             "%%3D%s",
             digest, digest);
    json_t *ans = NULL;
    int st = al_engine_post_fd(e, path, p[0], "application/x-tar", &ans, err);
    close(p[0]);
    int ws = 0;
    if (st < 0 || st != 200)
        kill(pid, SIGKILL);
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    const char *bad = json_string_value(json_object_get(ans, "error"));
    int r = 0;
    if (st < 0)
        r = st;
    else if (st != 200 || bad)
        r = al_err(err, "image", EIO, "load the image into Docker: %s", bad ? bad : err->msg);
    else if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        r = al_err(err, "image", EIO, "could not read the image's tree at %s (step %d)", root,
                   WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    json_decref(ans);
    return r;
}

int al_docker_image_loaded(al_engine *e, const char *digest, char ret_id[80], al_error *err) {
    if (strlen(digest) != 64 || strspn(digest, "0123456789abcdef") != 64)
        return al_err(err, "image", EINVAL, "not an image digest: %s", digest);
    int r = find(e, digest, ret_id, err);
    if (r == 0)
        return al_err(err, "image", ENOENT, "the image %.12s is not loaded into the daemon yet", digest);
    return r < 0 ? r : 0;
}

int al_docker_image(al_engine *e, const char *dir, const char *digest, char ret_id[80], al_error *err) {
    char root[4200];
    snprintf(root, sizeof root, "%s/rootfs", dir);
    if (strlen(digest) != 64 || strspn(digest, "0123456789abcdef") != 64)
        return al_err(err, "image", EINVAL, "not an image digest: %s", digest);
    int r = find(e, digest, ret_id, err);
    if (r != 0)
        return r < 0 ? r : 0;
    /* one load at a time per image: a second run waits for the first's */
    _cleanup_close_ int lock = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock < 0)
        return al_err(err, "image", errno, "open the image's tree %s: %m", root);
    while (flock(lock, LOCK_EX) < 0)
        if (errno != EINTR)
            return al_err(err, "image", errno, "lock the image: %m");
    r = find(e, digest, ret_id, err);
    if (r == 0 && (r = load(e, root, digest, err)) == 0) {
        r = find(e, digest, ret_id, err);
        if (r == 0)
            r = al_err(err, "image", EIO, "the daemon does not show the image it loaded");
    }
    flock(lock, LOCK_UN);
    return r < 0 ? r : 0;
}
