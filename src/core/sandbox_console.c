/* E2B sandboxes as the console shows them (sandbox.h, "the console"): the
 * workspace's list with each one's files counted, a sandbox's files, and
 * a kill that only its owner or an admin may make. The listing, the walk
 * and the kill are the E2B surface's own (sandbox_ctl.c, sandbox_fs.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "roles.h"
#include "sandbox_int.h"

/* Every regular file of SB beneath ROOT (one walk, bounded by the
 * sandbox's entries) appended to *V as PREFIX/rel; -errno. */
static int walk(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *prefix, al_sandbox_file **v,
                size_t *n, size_t *cap, al_error *err) {
    al_sandbox_entries l;
    int r = al_sandbox_fs_list(s, sb, root, "", WALK_DEPTH_MAX, &l, err);
    if (r == -ENOENT) /* a root not made yet holds nothing */
        return 0;
    for (size_t i = 0; r == 0 && i < l.n; i++) {
        /* files only: a FIFO or a socket a command left is not one (and
         * reading it would block) */
        if (l.v[i].dir || l.v[i].link || l.v[i].special)
            continue;
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 64;
            al_sandbox_file *nv = realloc(*v, nc * sizeof *nv);
            if (!nv) {
                r = al_err(err, "sandbox", ENOMEM, "out of memory");
                break;
            }
            *v = nv;
            *cap = nc;
        }
        snprintf((*v)[*n].path, sizeof (*v)[*n].path, "%s/%s", prefix, l.v[i].rel);
        (*v)[(*n)++].size = l.v[i].size;
    }
    al_sandbox_entries_free(&l);
    return r;
}

/* SB's files (or only their count, when RET is NULL). */
static int files_of(al_service *s, const al_sandbox *sb, al_sandbox_file **ret, size_t *ret_n, int64_t *count,
                    al_error *err) {
    al_sandbox_file *v = NULL;
    size_t n = 0, cap = 0;
    *count = 0;
    /* a count only (the workspace's list): the directories' entry types,
     * nothing stat'ed or kept (a list of 19 sandboxes of 8,000 files took
     * 500 to 760 ms by the listing's walk) */
    if (!ret) {
        int r = 0;
        for (int root = AL_SANDBOX_HOME; r == 0 && root <= AL_SANDBOX_OUT; root++) {
            r = al_sandbox_fs_count(s, sb, (al_sandbox_root)root, count, err);
            r = r == -ENOENT ? 0 : r; /* a root not made yet holds nothing */
        }
        return r;
    }
    int r = walk(s, sb, AL_SANDBOX_HOME, "/home/user", &v, &n, &cap, err);
    if (r == 0)
        r = walk(s, sb, AL_SANDBOX_OUT, "/out", &v, &n, &cap, err);
    if (r < 0) {
        free(v);
        return r;
    }
    *ret = v;
    *ret_n = n;
    *count = (int64_t)n;
    return 0;
}

void al_sandbox_views_free(al_sandbox_view *v, size_t n) {
    for (size_t i = 0; v && i < n; i++)
        al_sandbox_clear(&v[i].sb);
    free(v);
}

int al_sandbox_views(al_service *s, const al_principal *p, al_sandbox_view **ret, size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    al_sandbox_list l;
    al_sandbox_query q = { .limit = AL_SANDBOX_LIVE_MAX };
    int r = al_sandbox_list_page(s, p, &q, &l, err);
    if (r < 0)
        return r;
    al_sandbox_view *v = calloc(l.n ? l.n : 1, sizeof *v);
    if (!v) {
        al_sandbox_list_free(&l);
        return al_err(err, "sandbox", ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < l.n; i++) {
        v[i].sb = l.v[i];
        al_error ferr = { 0 };
        /* a tree that cannot be read (a kill under way) is said as -1, not
         * a failed list */
        if (files_of(s, &v[i].sb, NULL, NULL, &v[i].files, &ferr) < 0)
            v[i].files = -1;
    }
    /* the sandboxes moved into V: only the list's array goes */
    free(l.v);
    *ret = v;
    *ret_n = l.n;
    return 0;
}

int al_sandbox_files(al_service *s, const al_principal *p, const char *id, al_sandbox_file **ret, size_t *ret_n,
                     al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    al_sandbox sb;
    int r = al_sandbox_get(s, p, id, &sb, err);
    if (r < 0)
        return r;
    int64_t count;
    r = files_of(s, &sb, ret, ret_n, &count, err);
    al_sandbox_clear(&sb);
    return r;
}

int al_sandbox_kill_by(al_service *s, const al_principal *p, const char *id, al_error *err) {
    al_sandbox sb;
    int r = al_sandbox_get(s, p, id, &sb, err);
    if (r < 0)
        return r;
    bool mine = strcmp(sb.owner.person_id, p->person_id) == 0;
    al_sandbox_clear(&sb);
    if (!mine && al_principal_role(p) != AL_ROLE_ADMIN)
        return al_err(err, "sandbox", EPERM, "sandbox %s is another person's: only its owner or an admin may kill it",
                      id);
    return al_sandbox_kill(s, p, id, err);
}
