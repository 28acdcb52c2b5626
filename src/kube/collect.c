/* /out of a pod, as its collect sidecar's tar (decoded by logs.c),
 * unpacked beneath a private directory of ours with the unpacker the
 * docker box uses (box/untar.h), then collected into the run's out dir by
 * the native box's own rules and caps (box/collect.h): one set of rules
 * for every box. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../box/collect.h"
#include "../box/untar.h"
#include "kube_int.h"

int al_kube_collect(const al_box_config *cfg, int tarfd, const char *cut_why, al_box_result *res, al_error *err) {
    if (cfg->out_dirfd < 0)
        return 0;
    const al_box_limits *l = &cfg->limits;
    al_collect_limits cl = {
        .max_files = l->max_artifacts, .max_file_bytes = l->max_artifact_bytes,
        .max_total_bytes = l->max_artifacts_total, .max_depth = l->max_depth,
        .max_entries = l->max_artifacts * 10 + 1000, .uid = geteuid(), .gid = getegid(),
    };
    /* a directory of this process's alone (0700), on the host's temporary
     * files: at most what the tar's bound lets through (tmpfs_bytes) */
    const char *tmp = getenv("TMPDIR");
    char dir[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s/airlock-kube-out-XXXXXX", tmp && *tmp == '/' ? tmp : "/tmp") >=
        sizeof dir)
        return al_err(err, "collect", ENAMETOOLONG, "TMPDIR is too long for a directory beneath it: give airlock a "
                      "shorter TMPDIR");
    if (!mkdtemp(dir))
        return al_err(err, "collect", errno, "mkdtemp %s: %m", dir);
    int r;
    _cleanup_close_ int outfd = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (outfd < 0) {
        r = al_err(err, "collect", errno, "open %s: %m", dir);
        goto out;
    }
    if (cut_why)
        al_collect_add_skip(res, ".", cut_why);
    if (lseek(tarfd, 0, SEEK_SET) < 0) {
        r = al_err(err, "collect", errno, "lseek: %m");
        goto out;
    }
    if ((r = al_untar("out", &cl, tarfd, outfd, res, err)) < 0)
        goto out;
    r = al_collect(outfd, cfg->out_dirfd, &cl, res, err);
out:
    {
        char *slash = strrchr(dir, '/');
        *slash = '\0';
        _cleanup_close_ int parent = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
        if (parent >= 0)
            al_rm_tree(parent, slash + 1);
    }
    return r < 0 ? r : 0;
}
