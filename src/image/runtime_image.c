/*
 * The image runtime: the box's /usr, top-level links and /etc come from an
 * image's tree instead of the host. An imported image is untrusted content,
 * so every path inside it is opened beneath its root without following any
 * link (a /usr that is a link to / must not bind the host's root).
 */
#include <fcntl.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "../box/collect.h"
#include "../box/mount.h"
#include "image.h"

#define RO_ATTRS (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)

/* The image's REL in the box: an overlay of its own with OWN_INODES (every
 * box of an image reads one tree: al_mount_own_tree), else a bind. */
static int bind_beneath(int imgfd, const char *rel, int rootfd, bool own_inodes, al_error *err) {
    int src = al_openat_beneath(imgfd, rel, O_PATH | O_DIRECTORY, 0);
    if (src < 0)
        return src == -ENOENT ? 0 : al_err(err, "image", -src, "open /%s in the image: %s", rel, strerror(-src));
    _cleanup_close_ int s = src;
    if (mkdirat(rootfd, rel, 0755) < 0 && errno != EEXIST)
        return al_err(err, "image", errno, "mkdir /%s: %m", rel);
    if (own_inodes)
        return al_mount_own_tree(s, "", RO_ATTRS, rootfd, rel, err);
    _cleanup_close_ int t = open_tree(s, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
    if (t < 0)
        return al_err(err, "image", errno, "clone /%s of the image: %m", rel);
    struct mount_attr a = { .attr_set = RO_ATTRS, .propagation = MS_PRIVATE };
    if (mount_setattr(t, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a) < 0)
        return al_err(err, "image", errno, "make /%s read-only: %m", rel);
    return al_mount_attach(t, rootfd, rel, err);
}

static int image_open(const al_runtime *rt, al_error *err) {
    const al_image_runtime *ir = rt->data;
    char rootfs[4200];
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", ir->root);
    int fd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return al_err(err, "image", errno, "open the image %s: %m", rootfs);
    return fd;
}

static int image_populate(const al_runtime *rt, int img, int rootfd, bool own_inodes, al_error *err) {
    int r;
    if ((r = bind_beneath(img, "usr", rootfd, own_inodes, err)) < 0 ||
        (r = bind_beneath(img, "etc", rootfd, own_inodes, err)) < 0)
        return r;
    static const char *const top[] = { "bin", "lib", "lib32", "lib64", "libx32", "sbin" };
    for (size_t i = 0; i < ELEMENTSOF(top); i++) {
        struct stat st;
        if (fstatat(img, top[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            char target[256];
            ssize_t n = readlinkat(img, top[i], target, sizeof target - 1);
            if (n <= 0)
                continue;
            target[n] = '\0';
            /* the link resolves inside the box, where only the image is */
            if (symlinkat(target, rootfd, top[i]) < 0)
                return al_err(err, "image", errno, "link /%s: %m", top[i]);
        } else if (S_ISDIR(st.st_mode)) {
            if ((r = bind_beneath(img, top[i], rootfd, own_inodes, err)) < 0)
                return r;
        }
    }
    return 0;
}

void al_image_runtime_init(al_image_runtime *ir, const char *image_dir, const char *digest) {
    memset(ir, 0, sizeof *ir);
    snprintf(ir->root, sizeof ir->root, "%s", image_dir);
    snprintf(ir->digest, sizeof ir->digest, "sha256:%s", digest);
    ir->rt.name = ir->digest;
    ir->rt.digest = ir->digest;
    ir->rt.open = image_open;
    ir->rt.populate = image_populate;
    ir->rt.data = ir;
    /* matplotlib's font cache, built with the image, seeded writable */
    snprintf(ir->seed, sizeof ir->seed, "%s/rootfs", image_dir);
    ir->rt.tmp_seed_root = ir->seed;
    ir->rt.tmp_seed = "usr/share/airlock/matplotlib";
    ir->rt.tmp_seed_name = ".matplotlib";
}
