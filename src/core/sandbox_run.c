/* An E2B sandbox's runs: the flow of its working directory (sandbox_run.h). */
#include "sandbox_run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "artifacts.h"
#include "../store/sandboxes.h"
#include "sandbox.h"
#include "sandbox_int.h"
#include "service_int.h"

bool al_sandbox_run_of(const al_store_run *run, char *id, size_t n) {
    json_t *ins = run && run->inputs ? json_loads(run->inputs, 0, NULL) : NULL;
    const char *sb = json_string_value(json_object_get(ins, "sandbox"));
    /* the id names a directory: checked again, whatever wrote the record */
    bool ok = sb && al_valid_sandbox_id(sb) && strlen(sb) < n;
    if (ok)
        snprintf(id, n, "%s", sb);
    json_decref(ins);
    return ok;
}

int al_sandbox_run_dir(al_service *s, const char *id, const char *which, char *buf, size_t n) {
    return al_sandbox_dir(s, id, strcmp(which, "out") == 0 ? AL_SANDBOX_OUT : AL_SANDBOX_HOME, buf, n);
}

/* NEW (a directory the box's collection filled) in the place of CUR: the
 * two exchanged in one step, then what was CUR removed. */
static int swap_in(const char *new, const char *cur, al_error *err) {
    struct stat st;
    /* the sandbox killed while its command ran: nothing to put back, and
     * nothing wrong (its runs end as runs) */
    if (lstat(cur, &st) < 0 || !S_ISDIR(st.st_mode))
        return 0;
    if (syscall(SYS_renameat2, AT_FDCWD, new, AT_FDCWD, cur, RENAME_EXCHANGE) < 0)
        return al_err(err, "sandbox", errno, "cannot put %s in place of %s: %m", new, cur);
    al_rm_rf(new);
    return 0;
}

int al_sandbox_run_flow_back(al_service *s, const al_store_run *run, const char *dir, json_t *result, al_error *err) {
    char id[32];
    if (!al_sandbox_run_of(run, id, sizeof id))
        return 0;
    /* a box that did not collect its /work whole (it never ran, or the
     * collection failed) leaves the sandbox's home as it was: an empty or
     * partial tree must never replace it */
    if (!json_is_true(json_object_get(json_object_get(result, "box"), "work_collected")))
        return 0;
    return al_sandbox_flow_back_dir(s, id, dir, err);
}

int al_sandbox_flow_back_dir(al_service *s, const char *id, const char *dir, al_error *err) {
    char work[PATH_MAX + 16], out[PATH_MAX + 16], home[PATH_MAX], sb_out[PATH_MAX];
    snprintf(work, sizeof work, "%s/work", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    if (al_sandbox_run_dir(s, id, "home", home, sizeof home) < 0 ||
        al_sandbox_run_dir(s, id, "out", sb_out, sizeof sb_out) < 0)
        return al_err(err, "sandbox", ENAMETOOLONG, "the state directory's path is too long");
    int r = swap_in(work, home, err);
    if (r == 0)
        r = swap_in(out, sb_out, err);
    /* killed while its tree went back: the kill removes the row, then the
     * files, so either it removed what this put back, or its row is gone
     * now and what this put back is removed here (never left on disk with
     * no sandbox to count or reach it) */
    al_store_sandbox b = { 0 };
    al_error gerr = { 0 };
    if (al_store_sandbox_get(s->store, NULL, id, false, &b, &gerr) == -ENOENT)
        al_sandbox_remove_dirs(s, id);
    else if (r == 0) /* what the command left counts against its organisation's storage */
        al_sandbox_account(s, id);
    al_store_sandbox_done(&b);
    return r;
}
