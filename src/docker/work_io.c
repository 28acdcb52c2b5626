/* A sandbox's working directory out of the Docker box (container_int.h):
 * after the script's processes are dead and /out is collected, the box's
 * /work comes back as the native box's does (box.c's collect_work): the
 * same name rules (links, FIFOs, devices never come back; hostile names
 * skipped and listed), the caps of what the next box can stage of it, exec
 * bits kept, the box's own files (the script) left out. Its staging is
 * tar_io.c's (al_docker_stage_into), beside the run's inputs.
 */
#include "container_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the caps of /work's flow-back: a working directory's are what the next
 * box can stage of it (its files and bytes), not /out's artifact counts: a
 * tree cut at 100 files would lose the rest at the next command */
static al_collect_limits work_limits(const dbox *b, uid_t uid) {
    const al_box_limits *l = &b->cfg->limits;
    al_collect_limits wl = al_docker_collect_limits(b, uid);
    wl.keep_exec = true;
    wl.max_files = l->stage_files;
    wl.max_file_bytes = l->stage_bytes;
    wl.max_total_bytes = l->stage_bytes;
    wl.max_entries = l->stage_files * 2 + 1000;
    return wl;
}

/* The box's own files (the script, under a name of the box's) out of the
 * tree at WORKFD before it is collected: never the sandbox's. Nothing of
 * the script runs any more (runc: its uid's processes killed; gVisor: the
 * tree is our unpacked copy), and a name that is not a file now (the
 * script made it a directory) stays, as on the native box. */
static void drop_box_files(dbox *b, int workfd) {
    for (size_t i = 0; i < b->cfg->n_files; i++)
        unlinkat(workfd, b->cfg->files[i].name, 0);
}

int al_docker_collect_work(dbox *b, al_error *err) {
    const al_box_config *cfg = b->cfg;
    if (!cfg->collect_work)
        return 0;
    al_box_result w = { 0 };
    int r;
    if (b->o->runtime == AL_DOCKER_RUNC) {
        /* the container's own tmpfs, beneath its root, read with the
         * script's uid's rights (what it hid stays unread) */
        _cleanup_close_ int workfd = al_docker_open_scratch(b, "work", err);
        if (workfd < 0)
            return workfd;
        drop_box_files(b, workfd);
        al_collect_limits wl = work_limits(b, b->uid);
        r = al_collect(workfd, cfg->work_dirfd, &wl, &w, err);
    } else {
        al_collect_limits wl = work_limits(b, b->uid);
        r = al_docker_tar_collect(b, "work", &wl, cfg->work_dirfd, drop_box_files, &w, err);
    }
    /* what it skipped joins the run's skips as "work/PATH" */
    int k = 0;
    for (size_t i = 0; k == 0 && i < w.n_skipped; i++) {
        char *rel = NULL;
        if (asprintf(&rel, "work/%s", w.skipped[i].path) < 0)
            k = -ENOMEM;
        else
            k = al_collect_add_skip(b->res, rel, w.skipped[i].why);
        free(rel);
    }
    al_box_result_free(&w);
    /* whole, or the sandbox keeps the home it had (a tar that failed on
     * what the script left is the run's outcome, said in its skips) */
    b->res->work_collected = r == 0 && k == 0;
    if (r < 0)
        return r;
    return k;
}
