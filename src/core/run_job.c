/*
 * A run's job: what its driver needs to run it (drivers/job.h), built from
 * the run's record and what was staged for it. The driver and its helper
 * take it from here; the core never sees its wire form.
 */
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../image/image.h"
#include "folders.h"
#include "packages.h"
#include "run_job.h"
#include "sandbox.h"
#include "sandbox_run.h"
#include "service_int.h"
#include "skills.h"

/* The run's stored limits (its record's JSON: timeout_s, memory_bytes,
 * cpu_millis, pids, and timeout_ms when asked in milliseconds) over the
 * box's defaults. */
static void limits_of(const char *text, al_box_limits *l) {
    json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    static const char *const keys[] = { "timeout_s", "memory_bytes", "cpu_millis", "pids", "output_bytes",
                                        "tmpfs_bytes" };
    uint64_t *dst[] = { &l->wall_ms, &l->memory_bytes, &l->cpu_millis, &l->pids, &l->output_bytes, &l->tmpfs_bytes };
    for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (json_is_integer(v) && json_integer_value(v) >= 0)
            *dst[i] = (uint64_t)json_integer_value(v) * (i == 0 ? 1000 : 1);
    }
    /* a timeout asked in milliseconds is boxed with them, not its seconds */
    json_t *ms = json_object_get(o, "timeout_ms");
    if (json_is_integer(ms) && json_integer_value(ms) > 0)
        l->wall_ms = (uint64_t)json_integer_value(ms);
    json_decref(o);
}

/* The files staged in DIR/in, and DIR/documents (the thread's documents,
 * or those pinned at request time: the approval card names them), as the
 * job's inputs. */
static int stage_inputs(al_service *s, const al_store_run *run, const char *dir, al_job *j, json_t *docs_skipped,
                        al_error *err) {
    char in_dir[PATH_MAX + 64], docs[PATH_MAX + 64];
    snprintf(in_dir, sizeof in_dir, "%s/in", dir);
    snprintf(docs, sizeof docs, "%s/documents", dir);
    DIR *d = opendir(in_dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (de->d_name[0] != '.' || (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)) {
                char p[PATH_MAX + 320];
                snprintf(p, sizeof p, "%s/%s", in_dir, de->d_name);
                if (al_job_add_input(j, p) < 0) {
                    closedir(d);
                    return al_err(err, "stage", E2BIG, "more than %d inputs", AL_JOB_INPUTS_MAX);
                }
            }
        closedir(d);
    }
    /* a sandbox's run has its working directory instead: its thread's
     * artifacts (what earlier commands left in /out) are its out/, not
     * documents to stage (they would come back into its home) */
    char sb[32];
    if (al_sandbox_run_of(run, sb, sizeof sb))
        return 0;
    json_t *arts = run->inputs ? json_loads(run->inputs, 0, NULL) : NULL;
    /* what of the thread cannot be staged is listed, and the run starts; a
     * run whose documents were pinned at request time (its approval card
     * names them) gets exactly those versions, not the thread's latest */
    json_t *pinned = json_object_get(arts, "documents");
    json_t *pinned_ids = json_is_array(pinned) ? json_array() : NULL;
    size_t pi;
    json_t *pd;
    json_array_foreach(pinned, pi, pd) json_array_append(pinned_ids, json_object_get(pd, "id"));
    int r = al_artifacts_stage(s, run->workspace_id, pinned_ids || !run->thread_id[0] ? NULL : run->thread_id,
                               pinned_ids ? pinned_ids : json_object_get(arts, "artifacts"), docs, docs_skipped, err);
    json_decref(pinned_ids);
    /* the connected folders' files, after the documents (a document that
     * took a folder's name refuses the start): copied from beneath their
     * roots, each checked against what was pinned at the request (and
     * approved: a run whose documents were pinned had a card) */
    al_run_spec imp = { 0 };
    int fr = r < 0 ? 0 : al_run_spec_imports_of(json_object_get(arts, "imports"), &imp);
    if (fr < 0)
        r = al_err(err, "folder", -fr, "the run's folder imports cannot be read back");
    else if (r >= 0 && imp.n_imports &&
             (fr = al_folder_stage(s->store, run->workspace_id, &imp, docs, json_is_array(pinned), err)) < 0)
        r = fr;
    else if (r >= 0)
        r += fr;
    al_run_spec_free(&imp);
    json_decref(arts);
    if (r > 0 && al_job_add_input(j, docs) < 0)
        return al_err(err, "stage", E2BIG, "more than %d inputs", AL_JOB_INPUTS_MAX);
    return r < 0 ? r : 0;
}

/* The run's arguments, or a skill's: its bundle read-only at /skill, its
 * entrypoint run from there with the path of its arguments (staged as
 * /work/args.json). */
static int args_and_skill(al_service *s, const al_store_run *run, al_job *j, al_error *err) {
    json_t *ins = run->inputs ? json_loads(run->inputs, 0, NULL) : NULL;
    json_t *args = json_object_get(ins, "args"), *skill = json_object_get(ins, "skill"), *v;
    size_t i;
    int r = 0;
    if (json_is_array(args)) {
        j->has_args = true;
        json_array_foreach(args, i, v) if (r == 0) r = al_job_add_arg(j, json_string_value(v) ?: "");
    }
    if (r == 0 && skill) {
        const char *digest = json_string_value(json_object_get(skill, "digest"));
        char sdir[PATH_MAX + 80], script[512];
        if (al_skills_dir(s, digest, sdir, sizeof sdir) < 0 || access(sdir, F_OK) != 0) {
            r = al_err(err, "skill", ENOENT, "the skill's bundle %s is not in the store", digest);
        } else {
            snprintf(script, sizeof script, "/skill/%s", json_string_value(json_object_get(skill, "script")));
            for (i = 0; i < j->n_args; i++)
                free(j->args[i]);
            j->n_args = 0;
            if (al_job_set(&j->skill_dir, sdir) < 0 || al_job_set(&j->script, script) < 0 ||
                al_job_add_arg(j, "/work/args.json") < 0)
                r = -ENOMEM;
        }
    }
    json_decref(ins);
    return r == -E2BIG ? al_err(err, "stage", E2BIG, "more than %d arguments", AL_JOB_ARGS_MAX) : r;
}

/* A sandbox's run: its home staged as /work, and /work collected into
 * DIR/work (made here, empty), which the end of the run swaps in
 * (sandbox_run.c). */
static int sandbox_dirs(al_service *s, const al_store_run *run, const char *dir, al_job *j, al_error *err) {
    char id[32], home[PATH_MAX + 128], work[PATH_MAX + 64];
    if (!al_sandbox_run_of(run, id, sizeof id))
        return 0;
    if (al_sandbox_run_dir(s, id, "home", home, sizeof home) < 0)
        return al_err(err, "stage", ENAMETOOLONG, "the state directory's path is too long");
    struct stat st;
    /* a command that waited for an approval gets its home as pinned then
     * (runs.c), which its approval's hash was checked against */
    char pinned[PATH_MAX + 128];
    snprintf(pinned, sizeof pinned, "%s/" AL_SANDBOX_PINNED_HOME, dir);
    if (lstat(pinned, &st) == 0 && S_ISDIR(st.st_mode) && lstat(home, &st) == 0)
        snprintf(home, sizeof home, "%s", pinned);
    if (stat(home, &st) < 0 || !S_ISDIR(st.st_mode))
        return al_err(err, "stage", ENOENT, "sandbox %s is gone (killed or ended)", id);
    snprintf(work, sizeof work, "%s/work", dir);
    if (mkdir(work, 0700) < 0 && errno != EEXIST)
        return al_err(err, "stage", errno, "mkdir %s: %m", work);
    if (al_job_set(&j->work_in, home) < 0 || al_job_set(&j->work_out, work) < 0)
        return -ENOMEM;
    return 0;
}

int al_run_job_build(al_service *s, const al_store_run *run, const char *dir, al_job *ret, json_t **ret_docs_skipped,
                     al_error *err) {
    al_job_init(ret);
    *ret_docs_skipped = NULL;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return al_err(err, "stage", errno, "mkdir %s: %m", dir);
    limits_of(run->limits, &ret->limits);
    json_t *docs_skipped = json_array();
    int r = stage_inputs(s, run, dir, ret, docs_skipped, err);
    if (r < 0) {
        json_decref(docs_skipped);
        return r;
    }
    char out[PATH_MAX + 64], stdin_path[PATH_MAX + 64];
    snprintf(out, sizeof out, "%s/out", dir);
    if (mkdir(out, 0700) < 0 && errno != EEXIST) {
        json_decref(docs_skipped);
        return al_err(err, "stage", errno, "mkdir %s: %m", out);
    }
    *ret_docs_skipped = docs_skipped;
    ret->lang = al_lang_by_name(run->language);
    if (!ret->lang)
        return al_err(err, "job", EINVAL, "the run's language %s is not one airlock runs", run->language);
    if (al_job_set(&ret->code, run->code) < 0 || al_job_set(&ret->out_dir, out) < 0 ||
        al_job_set(&ret->network, run->network) < 0)
        return -ENOMEM;
    if ((r = args_and_skill(s, run, ret, err)) < 0)
        return r;
    if ((r = sandbox_dirs(s, run, dir, ret, err)) < 0)
        return r;
    snprintf(stdin_path, sizeof stdin_path, "%s/stdin", dir);
    if (access(stdin_path, F_OK) == 0 && al_job_set(&ret->stdin_path, stdin_path) < 0)
        return -ENOMEM;
    if (run->image[0]) {
        /* resolved again now: an image removed since the run was accepted
         * is a provisioning failure, not a broken box */
        char images[PATH_MAX + 16], idir[PATH_MAX + 64], digest[65];
        al_service_images_dir(&s->cfg, images, sizeof images);
        if ((r = (s->driver->image_by_reference ? al_image_resolve_ref : al_image_resolve)(images, run->image, idir,
                                                                                          sizeof idir, digest, err)) < 0)
            return r;
        if (al_job_set(&ret->image_dir, idir) < 0 || al_job_set(&ret->image_digest, digest) < 0)
            return -ENOMEM;
    }
    /* its packages, and its thread's: installed (or their layer reused)
     * before its box */
    return al_packages_job(s, run, ret, err);
}
