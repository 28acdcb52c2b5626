/*
 * Runs as records: creating one (the single path of POST /v1/runs, the
 * Piston API, MCP's code_execution and every skill run: validation, the
 * tool allow-list, network policy, approval, credits, queue, audit),
 * cancelling one, and the run object the API shows. No HTTP here: callers
 * get a status and a document.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "../image/image.h"
#include "audit.h"
#include "dlp.h"
#include "folders.h"
#include "packages.h"
#include "run_end.h"
#include "run_spec.h"
#include "sandbox.h"
#include "service.h"
#include "service_int.h"
#include "skills.h"
#include "../store/artifacts.h"
#include "../store/approvals.h"
#include "../store/tenants.h"


/* --------------------------------------------------------------- records */

bool al_run_state_terminal(const char *state) {
    return al_run_state_ended(al_run_state_from_name(state));
}


/* TEXT as a JSON string, null when NULL (or "" when EMPTY_NULL). */
static json_t *str_or_null(const char *text, bool empty_null) {
    return text && (!empty_null || text[0]) ? json_string(text) : json_null();
}

/* The limits of a run as the API shows them, from the stored document. */
static json_t *limits_json(const char *text) {
    json_t *lim = al_json_text(text);
    json_t *limits = json_pack("{s:O, s:I, s:f, s:O}", "timeout_s", json_object_get(lim, "timeout_s"), "memory_mb",
                               (json_int_t)(json_integer_value(json_object_get(lim, "memory_bytes")) >> 20), "cpus",
                               (double)json_integer_value(json_object_get(lim, "cpu_millis")) / 1000.0, "pids",
                               json_object_get(lim, "pids"));
    /* a timeout asked in milliseconds: what the box's clock was given */
    if (limits && json_is_integer(json_object_get(lim, "timeout_ms")))
        json_object_set(limits, "timeout_ms", json_object_get(lim, "timeout_ms"));
    json_decref(lim);
    return limits;
}

static json_t *error_json(const al_store_run *r) {
    return r->error_code[0] ? json_pack("{s:s, s:o}", "code", r->error_code, "message", str_or_null(r->error_message, false))
                            : json_null();
}

/* What every view of a run shows, the same in a list and alone. */
static json_t *run_base_json(const al_store_run *r, json_t *result) {
    json_t *out = json_pack("{s:s, s:s, s:s, s:o, s:s, s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:I, s:I, s:s}", "id", r->id,
                            "state", al_run_state_name(r->state) ?: "error", "language", r->language, "thread_id",
                            str_or_null(r->thread_id, true), "description", r->description ? r->description : "",
                            "network", str_or_null(r->network, false), "limits", limits_json(r->limits), "created_at",
                            r->created_at, "started_at", str_or_null(r->started_at, true), "finished_at",
                            str_or_null(r->finished_at, true), "result", result, "error", error_json(r), "redactions",
                            (json_int_t)r->redactions, "price", (json_int_t)r->price, "image",
                            r->image[0] ? r->image : "host");
    /* who asked, through what, and what it cost: the console's Activity
     * shows each without another request per row */
    if (out) {
        /* and which of the person's keys (its agents) asked: none for a
         * console session's run or one made before keys were recorded */
        json_t *key = r->key_id[0] ? json_pack("{s:s, s:o}", "id", r->key_id, "name",
                                               r->key_name ? json_string(r->key_name) : json_null())
                                   : json_null();
        json_object_set_new(out, "requested_by",
                            json_pack("{s:s, s:o, s:o, s:o}", "id", r->person_id, "name",
                                      r->person_name ? json_string(r->person_name) : json_null(), "role",
                                      str_or_null(r->person_role, true), "key", key));
        json_object_set_new(out, "via", json_string(r->via[0] ? r->via : "rest"));
        json_object_set_new(out, "credits", json_integer(r->credits > 0 ? r->credits : 0));
    }
    return out;
}

json_t *al_run_json(al_service *s, const al_store_run *row) {
    al_error err = { 0 };
    const char *id = row->id;
    json_t *result = al_json_text(row->result);
    if (json_is_object(result)) {
        /* output that is not text is stored as its bytes alone: its text
         * (U+FFFD for what is not UTF-8) is made again here */
        static const char *const keys[][2] = { { "stdout", "stdout_base64" }, { "stderr", "stderr_base64" } };
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
            if (json_object_get(result, keys[i][0]) || !json_is_string(json_object_get(result, keys[i][1])))
                continue;
            size_t len = 0;
            char *bytes = al_output_get(result, keys[i][0], &len);
            if (!bytes || al_output_set(result, keys[i][0], bytes, len) < 0)
                json_object_set_new(result, keys[i][0], json_string(""));
            free(bytes);
        }
        /* the box's internals (its cgroup path, its init's pid) stay on
         * the host, what ran it is said (controls.host_uid says the uid is
         * the run's own); artifacts and skips are given at the run's level */
        json_t *box = json_object_get(result, "box");
        if (json_is_object(box)) {
            json_object_del(box, "host_uid");
            json_object_del(box, "cgroup");
            json_object_del(box, "init_pid");
        }
        json_object_del(result, "artifacts");
        json_object_del(result, "skipped");
    }
    al_store_artifacts arts_of;
    json_t *arts = al_store_artifacts_of_run(s->store, id, &arts_of, &err) < 0 ? NULL : al_artifacts_json(&arts_of);
    al_store_artifacts_free(&arts_of);
    json_t *previews = al_json_text(row->previews);
    json_t *skipped = al_json_text(row->skipped);
    al_store_approval a;
    al_error aerr = { 0 }; /* none is no error: most runs have no approval */
    json_t *approval = json_null();
    if (al_store_approval_get(s->store, id, &a, &aerr) == 0) {
        approval = json_loads(a.card, 0, NULL);
        if (!approval)
            approval = json_object();
        const char *dec = al_approval_decision_name(a.decision);
        json_object_set_new(approval, "decision", dec ? json_string(dec) : json_null());
        json_object_set_new(approval, "decided_by", a.decided_by[0] ? json_string(a.decided_by) : json_null());
        json_object_set_new(approval, "decided_at", a.decided_at[0] ? json_string(a.decided_at) : json_null());
        json_object_set_new(approval, "reason", a.reason ? json_string(a.reason) : json_null());
        al_store_approval_done(&a);
    }
    json_t *out = run_base_json(row, result);
    if (out) {
        json_object_set_new(out, "artifacts", arts ? arts : json_array());
        json_object_set_new(out, "previews", json_is_array(previews) ? previews : (json_decref(previews), json_array()));
        json_object_set_new(out, "skipped", json_is_array(skipped) ? skipped : (json_decref(skipped), json_array()));
        json_object_set_new(out, "approval", approval);
        json_t *ins = al_json_text(row->inputs);
        json_t *sk = json_object_get(ins, "skill");
        if (json_is_object(sk))
            json_object_set_new(out, "skill", json_pack("{s:O, s:O, s:O, s:O, s:O}", "name", json_object_get(sk, "name"),
                                                        "version", json_object_get(sk, "version"), "digest",
                                                        json_object_get(sk, "digest"), "entrypoint",
                                                        json_object_get(sk, "entrypoint"), "mode",
                                                        json_object_get(sk, "mode")));
        /* the connected folders' files it gets (or got), as pinned */
        json_t *imps = json_object_get(ins, "imports");
        if (json_is_array(imps) && json_array_size(imps))
            json_object_set(out, "imports", imps);
        /* the packages the run asked for (what it got: result.packages) */
        json_t *pk = json_object_get(ins, "packages");
        if (json_is_object(pk))
            json_object_set(out, "packages", pk);
        json_decref(ins);
    } else {
        json_decref(arts);
        json_decref(previews);
        json_decref(skipped);
        json_decref(approval);
    }
    return out;
}

json_t *al_run_result_summary(json_t *result) {
    if (!json_is_object(result))
        return NULL;
    json_t *sum = json_object();
    static const char *const nums[] = { "exit_code", "signal", "reason", "stdout_bytes", "stderr_bytes",
                                        "wall_ms", "cpu_ms", "peak_memory_bytes" };
    for (size_t i = 0; sum && i < ELEMENTSOF(nums); i++)
        json_object_set(sum, nums[i], json_object_get(result, nums[i]) ?: json_null());
    static const char *const flags[] = { "stdout_truncated", "stderr_truncated" };
    for (size_t i = 0; sum && i < ELEMENTSOF(flags); i++) {
        json_t *v = json_object_get(result, flags[i]);
        json_object_set_new(sum, flags[i], json_boolean(json_is_true(v) || (json_is_integer(v) && json_integer_value(v))));
    }
    return sum;
}

/* A list's entry: what a run is, never what it printed. The store keeps a
 * summary of the result beside it (written when the run ends), so that a
 * list never loads a run's result, code or previews into the daemon: each
 * is up to megabytes, and a page holds up to 200 runs. GET /v1/runs/{id}
 * has the rest. */
json_t *al_run_summary_json(const al_store_run_brief *b) {
    const al_store_run *r = &b->run;
    json_t *result = json_null();
    if (r->result_summary) {
        json_t *sum = al_json_text(r->result_summary);
        result = json_object();
        static const char *const nums[] = { "exit_code", "signal", "reason", "stdout_bytes", "stderr_bytes",
                                            "wall_ms", "cpu_ms", "peak_memory_bytes" };
        for (size_t i = 0; i < ELEMENTSOF(nums); i++)
            json_object_set(result, nums[i], json_object_get(sum, nums[i]) ?: json_null());
        json_object_set_new(result, "stdout_truncated", json_boolean(json_is_true(json_object_get(sum, "stdout_truncated"))));
        json_object_set_new(result, "stderr_truncated", json_boolean(json_is_true(json_object_get(sum, "stderr_truncated"))));
        json_decref(sum);
    }
    json_t *out = run_base_json(r, result);
    if (!out)
        return NULL;
    json_object_set_new(out, "summary", json_true());
    json_object_set_new(out, "artifact_count", json_integer(b->artifact_count));
    json_object_set_new(out, "preview_count", json_integer(r->preview_count));
    json_object_set_new(out, "skipped_count", json_integer(r->skipped_count));
    json_object_set_new(out, "approval",
                        b->has_approval ? json_pack("{s:s, s:o, s:o, s:o}", "id", b->approval_id, "hash",
                                                    str_or_null(b->approval_hash, true), "decision",
                                                    str_or_null(b->approval_decision, true), "expires_at",
                                                    str_or_null(b->approval_expires_at, true))
                                        : json_null());
    if (r->skill_name)
        json_object_set_new(out, "skill", json_pack("{s:s, s:o}", "name", r->skill_name, "version",
                                                    str_or_null(r->skill_version, false)));
    return out;
}

al_store_run *al_run_load(al_service *s, const al_principal *p, const char *id) {
    al_error err = { 0 };
    al_store_run *run = NULL;
    return al_store_run_get(s->store, id, p->workspace_id, &run, &err) == 0 ? run : NULL;
}

al_status al_run_view(al_service *s, const al_principal *p, const char *id, json_t **ret_doc) {
    al_store_run *row = al_run_load(s, p, id);
    if (!row) {
        *ret_doc = json_pack("{s:{s:s, s:s+}}", "error", "code", "not_found", "message", "no run ", id);
        return AL_STATUS_NOT_FOUND;
    }
    if (!row->expired_at[0]) {
        *ret_doc = al_run_json(s, row);
        al_store_run_free(row);
        return *ret_doc ? AL_STATUS_OK : AL_STATUS_INTERNAL;
    }
    /* past its retention: what was kept (its summary; its audit events are
     * in GET /v1/audit), said with when the rest went */
    al_store_run_brief b = { .run = *row };
    char msg[400];
    snprintf(msg, sizeof msg,
             "run %s ended at %s and was kept for its workspace's run_retention_s: its code, output and events "
             "were removed at %s; its summary (below) and its audit events are kept",
             row->id, row->finished_at, row->expired_at);
    json_t *sum = al_run_summary_json(&b);
    if (sum)
        json_object_set_new(sum, "expired_at", json_string(row->expired_at));
    *ret_doc = json_pack("{s:{s:s, s:s}, s:o?}", "error", "code", "expired", "message", msg, "run", sum);
    al_store_run_free(row);
    return AL_STATUS_GONE;
}

/* ----------------------------------------------------------- errors */

/* An error answer of al_run_create: the status, and the document in *RET. */
static al_status run_error(json_t **ret, al_status status, const char *code, const char *fmt, ...) _printf_(4, 5);
static al_status run_error(json_t **ret, al_status status, const char *code, const char *fmt, ...) {
    char msg[2048]; /* a packages refusal names every spec asked */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    al_utf8_fix(msg); /* it may quote the request, cut at a byte count */
    *ret = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
    return status;
}

/* SP's folders' imports read and pinned in SP (al_folder_resolve): OK, or
 * the refusal in *RET_DOC: a rule broken, an unknown folder or path is
 * 400, a folder whose root is no longer the directory registered 409. */
static al_status folder_imports(al_service *s, const al_principal *p, al_run_spec *sp, json_t **ret_doc) {
    al_error err = { 0 };
    if (!sp->n_folders)
        return AL_STATUS_OK;
    if (sp->sandbox.s)
        return run_error(ret_doc, AL_STATUS_INVALID, "bad_request",
                         "folders: a sandbox's command works in the sandbox's files; import folders when the "
                         "sandbox is made (metadata airlock_folders)");
    int r = al_folder_resolve(s->store, p->workspace_id, sp, &err);
    if (r == 0)
        return AL_STATUS_OK;
    if (r == -ESTALE)
        return run_error(ret_doc, AL_STATUS_CONFLICT, "folder_changed", "%s", err.msg);
    if (r == -EIO || r == -ENOMEM)
        return run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "%s", err.msg[0] ? err.msg : "cannot read the folders");
    return run_error(ret_doc, AL_STATUS_INVALID, "bad_request", "%s", err.msg);
}

/* The answer about run RUN_ID of P, just made or found by its
 * Idempotency-Key: created and the run, or with X->wait OK once it has ended
 * (or the wait ran out). */
static al_status run_answer(al_service *s, const al_principal *p, const char *run_id, const al_run_extra *x,
                            json_t **ret_doc) {
    al_store_run *row = al_run_load(s, p, run_id);
    if (row && x->wait) {
        uint64_t secs = x->wait_secs;
        if (!secs) {
            /* the run's timeout + 30 s */
            json_t *lim = al_json_text(row->limits);
            secs = (uint64_t)json_integer_value(json_object_get(lim, "timeout_s")) + 30;
            json_decref(lim);
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)secs;
        al_store_run_free(row);
        al_error err = { 0 };
        for (;;) {
            /* only the state on each wake-up (the whole row holds the code,
             * up to a MiB), and only this run's events wake it */
            uint64_t gen = al_service_run_event_gen(s, run_id);
            al_run_state st;
            bool over = al_store_run_state(s->store, run_id, &st, &err) < 0 || al_run_state_ended(st);
            if (over || !al_service_wait_run_event(s, run_id, gen, &until))
                break;
        }
        row = al_run_load(s, p, run_id);
    }
    if (!row)
        return run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "run vanished");
    *ret_doc = al_run_json(s, row);
    al_store_run_free(row);
    return x->wait ? AL_STATUS_OK : AL_STATUS_CREATED;
}

/* A request with an Idempotency-Key that an earlier request of P used:
 * false when none did (go on and create), else true and the answer's
 * status (the run that request made, or a conflict when it was another
 * request). */
bool al_run_replay(al_service *s, const al_principal *p, const al_run_extra *x, al_status *ret_status,
                   json_t **ret_doc) {
    al_error err = { 0 };
    char run_id[40];
    if (!x->idem || !x->idem->key[0])
        return false;
    int r = al_idem_lookup(s->store, p, x->idem, "run", run_id, &err);
    if (r == 0)
        return false;
    if (r == -EEXIST)
        *ret_status = run_error(ret_doc, AL_STATUS_CONFLICT, "idempotency_conflict", "%s", err.msg);
    else if (r < 0)
        *ret_status = run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "idempotency key: %s", err.msg);
    else {
        x->idem->replayed = true;
        *ret_status = run_answer(s, p, run_id, x, ret_doc);
    }
    return true;
}

/* The workspace's say before anything of the request is looked at: its
 * settings (*RET_SETTINGS), whether TOOL is on its allow-list, and the
 * bounds of a run's limits from its maxima. OK, or the refusal in *RET_DOC. */
static al_status admit(al_service *s, const al_principal *p, const char *tool, al_settings *ret_settings,
                       al_run_bounds *ret_bounds, json_t **ret_doc) {
    al_error err = { 0 };
    al_settings *settings = ret_settings;
    if (al_settings_get(s, p->workspace_id, settings, &err) < 0) /* fail closed: never a run under default settings */
        return run_error(ret_doc, AL_STATUS_UNAVAILABLE, "settings_unavailable", "%s: no run starts until they can be", err.msg);
    /* the IAM decision: is code execution a tool this workspace may call? */
    if (!al_settings_tool_allowed(settings, tool)) {
        al_workspace_audit(s, p, "capability.invoke_denied",
                           json_pack("{s:s, s:s}", "tool", tool, "reason", "not on the workspace's tool allow-list"), &err);
        return run_error(ret_doc, AL_STATUS_FORBIDDEN, "tool_not_allowed", "%s is not on this workspace's tool allow-list", tool);
    }
    /* the workspace's maxima, which bound the request's limits; fail
     * closed: a maximum that cannot be read is not 0, which the box reads
     * as "no limit" */
    al_store_workspace w;
    bool maxima_ok = al_store_workspace_get(s->store, p->workspace_id, &w, &err) == 0 && w.max_memory_mb >= 16 &&
                     w.max_cpus_milli >= 10 && w.max_pids >= 8;
    if (!maxima_ok)
        return run_error(ret_doc, AL_STATUS_UNAVAILABLE, "settings_unavailable", "the workspace's limits (its maximum memory, CPUs and "
                         "processes) cannot be read: no run starts until they can be");
    double max_t = settings->max_timeout_s;
    if (max_t > s->cfg.max_timeout_s)
        max_t = s->cfg.max_timeout_s;
    /* the spec's check reads no store: what it holds the request to is
     * read here */
    *ret_bounds = (al_run_bounds){
        .code_max = s->cfg.code_max,
        .files_max = s->cfg.files_max,
        .limit = {
            [AL_LIMIT_TIMEOUT_S] = { settings->timeout_s, 1, max_t },
            [AL_LIMIT_MEMORY_MB] = { settings->memory_mb, 16,
                                     (double)w.max_memory_mb },
            [AL_LIMIT_CPUS] = { settings->cpus, 0.01,
                                (double)w.max_cpus_milli / 1000.0 },
            [AL_LIMIT_PIDS] = { 256, 8, (double)w.max_pids },
        },
    };
    return AL_STATUS_OK;
}

/* SP checked against B, its image resolved to the digest it names (so the
 * run, and its approval card, name exactly one tree) and its network
 * policy (or the workspace's default) allowed by SETTINGS, in canonical
 * form. OK, or the refusal in *RET_DOC. */
static al_status resolve(al_service *s, al_run_spec *sp, const al_run_bounds *b, const al_settings *settings,
                         json_t **ret_doc) {
    char pmsg[600];
    const char *pcode = NULL;
    al_status st = al_run_spec_check(sp, b, pmsg, sizeof pmsg, &pcode);
    if (st != AL_STATUS_OK)
        return run_error(ret_doc, st, pcode, "%s", pmsg);
    /* a driver whose boxes cannot run on the host's /usr runs on the
     * default image when the run names none */
    if (!sp->image.s && s->driver->needs_image && al_run_text_set(&sp->image, "default", 7) < 0)
        return run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "out of memory");
    char image_ref[80] = "host";
    if (sp->image.s && strcmp(sp->image.s, "host") != 0) {
        char images[PATH_MAX + 16], idir[PATH_MAX + 64], digest[65];
        al_error ierr = { 0 };
        al_service_images_dir(&s->cfg, images, sizeof images);
        if ((s->driver->image_by_reference ? al_image_resolve_ref : al_image_resolve)(images, sp->image.s, idir,
                                                                                     sizeof idir, digest, &ierr) < 0)
            return run_error(ret_doc, AL_STATUS_INVALID, "bad_request",
                             "image: %s (this service's images setting; `airlock image --images %s ls` lists them)",
                             ierr.msg[0] ? ierr.msg : "want an alias or sha256 digest", images);
        snprintf(image_ref, sizeof image_ref, "sha256:%s", digest);
    }
    _cleanup_free_ al_net_policy *def = NULL;
    const al_net_policy *np = sp->net;
    al_error nerr = { 0 };
    if (!np) {
        def = malloc(sizeof *def);
        if (!def || al_net_policy_parse(settings->network, def, &nerr) < 0)
            return run_error(ret_doc, AL_STATUS_INVALID, "bad_request", "network: %s", def ? nerr.msg : "out of memory");
        np = def;
    }
    if (al_settings_network_check(settings->doc, np, &nerr) < 0)
        return run_error(ret_doc, AL_STATUS_FORBIDDEN, "network_not_allowed", "%s", nerr.msg);
    char net_spec[AL_NET_MAX_HOSTS * AL_NET_NAME_MAX];
    al_net_policy_format(np, net_spec, sizeof net_spec);
    if (al_run_spec_resolve(sp, image_ref, net_spec) < 0)
        return run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "out of memory");
    return AL_STATUS_OK;
}

/* What refuses a run that is well formed: an artifact it names that P's
 * workspace does not have, the driver, the organisation's credits, its
 * storage, the queue. OK, or the refusal in *RET_DOC. */
static al_status refusals(al_service *s, const al_principal *p, const al_run_spec *sp, const char *tool,
                          const al_settings *settings, int64_t price, json_t **ret_doc) {
    al_error err = { 0 };
    for (size_t i = 0; i < sp->n_artifacts; i++) {
        const al_run_text *aid = &sp->artifacts[i];
        al_store_artifact a;
        /* an id with a NUL would be looked up cut short: it names none */
        if (!aid->s || strlen(aid->s) != aid->len || al_store_artifact_get(s->store, p->workspace_id, aid->s, &a, &err) < 0)
            return run_error(ret_doc, AL_STATUS_NOT_FOUND, "not_found", "artifacts[%zu]: no such artifact", i);
        al_store_artifact_done(&a);
    }
    /* packages: the workspace's, the driver's and the service's say (the
     * driver's name, before whether it answers now) */
    char kmsg[1600];
    const char *kcode = NULL;
    al_status kst = al_packages_admit(s, p, settings, sp, &kcode, kmsg, sizeof kmsg);
    if (kst != AL_STATUS_OK)
        return run_error(ret_doc, kst, kcode, "%s", kmsg);
    al_error perr = { 0 };
    if (settings->disabled) {
        snprintf(perr.msg, sizeof perr.msg, "code execution is disabled for this workspace (driver = disabled)");
        perr.err = ENOTSUP;
    }
    if (perr.err || s->driver->probe(&perr) < 0) {
        al_workspace_audit(s, p, "capability.invoke_denied", json_pack("{s:s, s:s}", "tool", tool, "reason", perr.msg),
                           &err);
        return run_error(ret_doc, AL_STATUS_UNAVAILABLE, "driver_disabled", "%s", perr.msg);
    }

    /* queued runs are charged when they start: the credits they will take
     * are spoken for, and a run they leave no credits for could never be
     * paid (it would only hold a place in the queue) */
    int64_t reserved = 0, balance = al_credits_balance(s, p->org_id);
    int64_t avail = price > 0 ? al_credits_unreserved(s, p->org_id, &reserved) : balance;
    if (price > 0 && avail < price) {
        al_workspace_audit(s, p, "capability.invoke_denied",
                           json_pack("{s:s, s:s}", "tool", tool, "reason", "insufficient credits"), &err);
        if (reserved > 0)
            return run_error(ret_doc, AL_STATUS_PAYMENT_REQUIRED, "payment_required",
                             "a run costs %lld credits and the organisation has %lld, of which its queued runs "
                             "(charged when they start) hold %lld",
                             (long long)price, (long long)balance, (long long)reserved);
        return run_error(ret_doc, AL_STATUS_PAYMENT_REQUIRED, "payment_required", "a run costs %lld credits and the organisation has %lld",
                         (long long)price, (long long)balance);
    }
    /* artifacts, and the inputs of the organisation's runs that have not
     * ended (on disk as long as they wait), this one's included */
    int64_t input_bytes = al_run_spec_input_bytes(sp);
    int64_t quota = al_artifacts_org_quota(s, p->org_id);
    int64_t used = al_artifacts_org_usage(s, p->org_id), pending = al_runs_pending_input_bytes(s, p->org_id);
    if (used == AL_USAGE_UNKNOWN || pending == AL_USAGE_UNKNOWN)
        return run_error(ret_doc, AL_STATUS_UNAVAILABLE, "storage_unavailable", "the organisation's storage use cannot be read: try again");
    /* the run's code is stored with it (and its output once it ends,
     * counted then): it needs room too */
    int64_t code_bytes = sp->code.s ? (int64_t)sp->code.len : 0;
    if (used >= quota || used + pending + input_bytes + code_bytes > quota)
        return run_error(ret_doc, AL_STATUS_QUOTA, "quota_exceeded",
                         "the organisation's storage (%lld bytes) is full: artifacts, skills and runs (their code "
                         "and output) hold %lld, inputs of runs that wait %lld, and this run's code and inputs are %lld",
                         (long long)quota, (long long)used, (long long)pending, (long long)(input_bytes + code_bytes));
    /* the queue, and this person's and organisation's share of it (runs
     * waiting for an approval count in the person's) */
    al_error qerr = { 0 };
    int64_t pend = 0;
    al_store_runs_count_of(s->store, p->person_id, AL_RUN_PENDING_APPROVAL, &pend, &err);
    /* http.c's answer adds Retry-After to every BUSY (429) */
    if (al_service_queue_room(s, p->person_id, p->org_id, (int)pend, &qerr) < 0)
        return run_error(ret_doc, AL_STATUS_BUSY, "queue_full", "%s", qerr.msg);
    return AL_STATUS_OK;
}

/* LEN bytes of DATA as the new file PATH. */
static int write_new(const char *path, const void *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    int r = fd < 0 ? -errno : al_write_all(fd, data, len) < 0 ? -errno : 0;
    if (fd >= 0)
        close(fd);
    return r;
}

/* SP's inputs on disk, not in the database: DIR/stdin, and the inline
 * files (a skill's args.json among them) in DIR/in. OK, or the refusal in
 * *RET_DOC and nothing left of DIR. */
static al_status store_inputs(const al_run_spec *sp, const char *dir, json_t **ret_doc) {
    const char *args_json = sp->skill ? sp->skill->args_json : NULL;
    bool has_in = sp->n_files || args_json;
    if (!has_in && !sp->stdin_text.s)
        return AL_STATUS_OK;
    char in[PATH_MAX + 80], path[PATH_MAX + 400];
    snprintf(in, sizeof in, "%s/in", dir);
    al_status ret = AL_STATUS_OK;
    int r;
    if (mkdir(dir, 0700) < 0) {
        ret = run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "cannot store the run's files: %s", strerror(errno));
        goto out;
    }
    snprintf(path, sizeof path, "%s/stdin", dir);
    if (sp->stdin_text.s && (r = write_new(path, sp->stdin_text.s, sp->stdin_text.len)) < 0) {
        ret = run_error(ret_doc, AL_STATUS_QUOTA, "storage", "cannot store the run's stdin: %s", strerror(-r));
        goto out;
    }
    if (has_in && mkdir(in, 0700) < 0) {
        ret = run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "cannot store the run's files: %s", strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < sp->n_files; i++) {
        snprintf(path, sizeof path, "%s/%s", in, sp->files[i].name.s);
        if ((r = write_new(path, sp->files[i].data, sp->files[i].len)) < 0) {
            ret = run_error(ret_doc, AL_STATUS_QUOTA, "storage", "cannot store the run's files: %s", strerror(-r));
            goto out;
        }
    }
    /* a skill's arguments: /work/args.json in the box */
    snprintf(path, sizeof path, "%s/%s", in, AL_RUN_SKILL_ARGS_NAME);
    if (args_json && (r = write_new(path, args_json, strlen(args_json))) < 0)
        ret = run_error(ret_doc, AL_STATUS_QUOTA, "storage", "cannot store the skill's arguments: %s", strerror(-r));
out:
    if (ret != AL_STATUS_OK)
        al_rm_rf(dir);
    return ret;
}

/* SP's sandbox's home copied into DIR (the run's) for its approval, its
 * bytes in *RET_BYTES, within the organisation's storage with the rest of
 * the run's inputs: OK, or the refusal in *RET_DOC (DIR removed). */
static al_status pin_sandbox_home(al_service *s, const al_principal *p, const al_run_spec *sp, const char *dir,
                                  int64_t *ret_bytes, json_t **ret_doc) {
    char pinned[PATH_MAX + 128];
    snprintf(pinned, sizeof pinned, "%s/" AL_SANDBOX_PINNED_HOME, dir);
    al_error perr = { 0 };
    al_status ret = AL_STATUS_OK;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        ret = run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "cannot store the run's files: %s", strerror(errno));
    else if (al_sandbox_pin_home(s, sp->sandbox.s, pinned, ret_bytes, &perr) < 0)
        ret = run_error(ret_doc, perr.err == EDQUOT ? AL_STATUS_QUOTA : AL_STATUS_INTERNAL, "storage",
                        "cannot keep the sandbox's files for the approval: %s", perr.msg);
    if (ret == AL_STATUS_OK) {
        int64_t quota = al_artifacts_org_quota(s, p->org_id), used = al_artifacts_org_usage(s, p->org_id),
                pending = al_runs_pending_input_bytes(s, p->org_id);
        int64_t mine = al_run_spec_input_bytes(sp) + (sp->code.s ? (int64_t)sp->code.len : 0) + *ret_bytes;
        if (used == AL_USAGE_UNKNOWN || pending == AL_USAGE_UNKNOWN)
            ret = run_error(ret_doc, AL_STATUS_UNAVAILABLE, "storage_unavailable",
                            "the organisation's storage use cannot be read: try again");
        else if (used + pending + mine > quota)
            ret = run_error(ret_doc, AL_STATUS_QUOTA, "quota_exceeded",
                            "the organisation's storage (%lld bytes) is full: artifacts, skills and runs hold %lld, "
                            "inputs of runs that wait %lld, and this command's code, inputs and the sandbox's files "
                            "kept for its approval are %lld",
                            (long long)quota, (long long)used, (long long)pending, (long long)mine);
    }
    if (ret != AL_STATUS_OK)
        al_rm_rf(dir);
    return ret;
}

/* The approval card of the run REC (about to be recorded from SP): SP and
 * its inputs as stored (the documents as pinned) hashed, and the card the
 * approver sees, into *RET (its store row; RET->card is new). Made before
 * the run is recorded, so that the run and its card are recorded together
 * and no one sees the run waiting without it. OK, or the refusal in
 * *RET_DOC. */
static al_status approval_card(al_service *s, const al_run_spec *sp, const al_store_run *rec, const al_settings *settings,
                               al_store_approval *ret, json_t **ret_doc) {
    al_error err = { 0 };
    char in_hash[65] = "";
    json_t *manifest = al_approval_manifest(s, rec, &err);
    al_run_staged staged = { 0 };
    if (manifest && al_approval_staged(manifest, &staged) == 0)
        al_run_spec_hash(sp, &staged, in_hash);
    al_run_staged_free(&staged);
    if (!in_hash[0]) {
        json_decref(manifest);
        return run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "cannot read back the run's inputs for its approval card: %s",
                         err.msg[0] ? err.msg : "out of memory");
    }
    *ret = (al_store_approval){ 0 };
    al_store_new_id("apr", ret->id, sizeof ret->id);
    al_rfc3339_after(settings->approval_ttl_s, ret->expires_at, sizeof ret->expires_at);
    json_t *card = json_pack("{s:s, s:s%, s:s, s:s, s:s, s:o, s:s, s:s, s:s, s:s, s:s}", "id", ret->id, "code",
                             sp->code.s, sp->code.len, "language", sp->language.s, "runtime", sp->image.s, "network",
                             sp->network.s, "limits", limits_json(rec->limits), "risk", "high", "description",
                             rec->description ? rec->description : "", "hash", in_hash, "requested_at", rec->created_at,
                             "expires_at", ret->expires_at);
    /* what goes in the box besides the code: names, sizes and sha256,
     * each with the URL of its bytes */
    if (card)
        json_object_set_new(card, "inputs", al_approval_card_inputs(rec->id, manifest));
    /* and what is installed before it: the approver sees every package */
    json_t *pk = card ? al_packages_card(s, rec->workspace_id, sp) : NULL;
    if (pk)
        json_object_set_new(card, "packages", pk);
    json_decref(manifest);
    ret->card = card ? json_dumps(card, JSON_COMPACT) : NULL;
    json_decref(card);
    if (!ret->card)
        return run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "cannot build the approval card: out of memory");
    snprintf(ret->run_id, sizeof ret->run_id, "%s", rec->id);
    snprintf(ret->org_id, sizeof ret->org_id, "%s", rec->org_id);
    snprintf(ret->workspace_id, sizeof ret->workspace_id, "%s", rec->workspace_id);
    snprintf(ret->hash, sizeof ret->hash, "%s", in_hash);
    snprintf(ret->requested_at, sizeof ret->requested_at, "%s", rec->created_at);
    return AL_STATUS_OK;
}

/* REC, its approval card APPR (when not NULL), P's Idempotency-Key and the
 * audit event that allows it, in one transaction: a crash leaves all or
 * none, of two concurrent requests with one key only the first records a
 * run, and no one sees a run that waits for an approval without its card.
 * When the audit event or the card cannot be written, the run is recorded
 * ended in error instead (a card no one can see would be waited for
 * forever, and a run the trail cannot show does not start), its key is
 * forgotten (nothing ran: a retry is a new attempt) and whoever follows it
 * sees the end. OK, or the refusal in *RET_DOC (the answer to a retry that
 * got there first included). */
static al_status record_run(al_service *s, const al_principal *p, const al_run_extra *ex, al_store_run *rec,
                            const al_store_approval *appr, const char *tool, json_t **ret_doc) {
    al_error err = { 0 }, ferr = { 0 };
    bool idem = ex->idem && ex->idem->key[0];
    int n = al_store_begin(s->store, &err), taken = 0;
    if (n < 0)
        return run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "cannot record the run: %s", err.msg);
    /* stamped inside the unit of work, which holds the store: runs are
     * listed newest first in insertion order, and the stamps must agree
     * (one stamped before a wait for the store would list out of order) */
    al_store_now(rec->created_at, sizeof rec->created_at);
    if (idem)
        n = taken = al_idem_record(s->store, p, ex->idem, "run", rec->id, &err);
    if (n >= 0)
        n = al_store_run_insert(s->store, rec, &err);
    /* a step after the row that fails (its own write undone) ends the run */
    const char *fail = NULL, *why = NULL;
    if (n >= 0 &&
        al_governance_audit(s, rec, "capability.invoke_allowed", NULL,
                            json_pack("{s:s, s:s, s:s, s:s}", "tool", tool, "language", rec->language, "approval",
                                      appr ? "required" : "not required", "via", ex->via ? ex->via : "rest")) < 0) {
        fail = "audit_failed"; /* the log says why */
        why = "its audit event could not be written";
    } else if (n >= 0 && appr && al_store_approval_insert(s->store, appr, &ferr) < 0) {
        fail = "approval";
        why = "its approval card could not be recorded";
    }
    if (n >= 0 && fail) {
        char now[40];
        al_store_now(now, sizeof now);
        n = al_store_run_end(s->store, rec->id, AL_RUN_BIT(rec->state), AL_RUN_ERROR, fail, why, now, &err);
        if (n >= 0 && idem)
            n = al_idem_forget(s->store, p, ex->idem, rec->id, &err);
    }
    if (n >= 0)
        n = al_store_commit(s->store, &err);
    else
        al_store_rollback(s->store);
    if (n < 0) {
        al_status ret;
        /* the same key's other request recorded its run meanwhile */
        if (taken == -EEXIST && al_run_replay(s, p, ex, &ret, ret_doc))
            return ret;
        return run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "cannot record the run: %s",
                         err.msg[0] ? err.msg : strerror(-n));
    }
    if (!fail)
        return AL_STATUS_OK;
    al_run_ended(s, rec->id, rec, &(al_run_end){ .state = AL_RUN_ERROR, .error_code = fail });
    if (strcmp(fail, "audit_failed") == 0)
        return run_error(ret_doc, AL_STATUS_INTERNAL, "audit_failed", "the run's audit event could not be written: it was not started");
    return run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "cannot record the approval card: %s", ferr.msg);
}

al_status al_run_create(al_service *s, const al_principal *p, al_run_spec *sp, const al_run_extra *extra,
                        json_t **ret_doc) {
    al_error err = { 0 };
    static const al_run_extra none = { 0 };
    const al_run_extra *ex = extra ? extra : &none;
    const char *tool = ex->tool ? ex->tool : "code_execution";
    const char *via = ex->via ? ex->via : "rest";
    *ret_doc = NULL;
    /* a retry of a request that made its run gets that run, before any
     * check that could answer otherwise now (credits spent, queue full) */
    bool idem = ex->idem && ex->idem->key[0];
    al_status ret = AL_STATUS_INTERNAL;
    if (idem && al_run_replay(s, p, ex, &ret, ret_doc))
        return ret;
    al_settings settings_of = { 0 }, *settings = &settings_of;
    al_run_bounds bounds;
    if ((ret = admit(s, p, tool, settings, &bounds, ret_doc)) != AL_STATUS_OK)
        goto out;
    /* a deadline the caller's client holds (E2B's timeoutMs): the run's
     * timeout, within the workspace's bounds rather than refused by them */
    al_run_limit_req *t = &sp->limit[AL_LIMIT_TIMEOUT_S];
    if (ex->timeout_within_s > 0 && !t->has) {
        double v = ex->timeout_within_s, lo = bounds.limit[AL_LIMIT_TIMEOUT_S].min,
               hi = bounds.limit[AL_LIMIT_TIMEOUT_S].max;
        *t = (al_run_limit_req){ .has = true, .value = v > hi ? hi : v < lo ? lo : v };
    }
    if ((ret = resolve(s, sp, &bounds, settings, ret_doc)) != AL_STATUS_OK)
        goto out;
    /* a run that installs packages pays for the install's time too */
    int64_t price = al_packages_price(s, p, sp, settings->price_per_run);
    if ((ret = refusals(s, p, sp, tool, settings, price, ret_doc)) != AL_STATUS_OK ||
        (ret = folder_imports(s, p, sp, ret_doc)) != AL_STATUS_OK)
        goto out;
    char run_id[40], now[40], dir[PATH_MAX + 64];
    al_store_new_id("run", run_id, sizeof run_id);
    al_store_now(now, sizeof now);
    snprintf(dir, sizeof dir, "%s/%s", s->runs_dir, run_id);
    if ((ret = store_inputs(sp, dir, ret_doc)) != AL_STATUS_OK)
        goto out;
    /* code execution is risk "high": high_risk asks for approval as always does */
    bool needs_approval = settings->approval_policy == AL_APPROVAL_ALWAYS ||
                          settings->approval_policy == AL_APPROVAL_HIGH_RISK;
    /* a sandbox's command that waits for an approval runs on its home as
     * the approver sees it: copied now (the run's own, as its inputs are),
     * listed on the card, bound by its hash and staged in the home's place
     * (run_job.c), whatever is written to the sandbox meanwhile */
    int64_t pinned_bytes = 0;
    if (needs_approval && sp->sandbox.s && (ret = pin_sandbox_home(s, p, sp, dir, &pinned_bytes, ret_doc)) != AL_STATUS_OK)
        goto out;
    al_store_run rec = { 0 };
    if (al_run_spec_record(sp, via, NULL, &rec) < 0) {
        al_rm_rf(dir);
        ret = run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "out of memory");
        goto out;
    }
    snprintf(rec.id, sizeof rec.id, "%s", run_id);
    snprintf(rec.org_id, sizeof rec.org_id, "%s", p->org_id);
    snprintf(rec.workspace_id, sizeof rec.workspace_id, "%s", p->workspace_id);
    snprintf(rec.person_id, sizeof rec.person_id, "%s", p->person_id);
    /* which of the person's agents asked: the key that authenticated the
     * call, whatever the interface (a sandbox's command: the key that made
     * the sandbox); none for a person's console session */
    snprintf(rec.key_id, sizeof rec.key_id, "%s", p->key_id);
    snprintf(rec.created_at, sizeof rec.created_at, "%s", now);
    rec.state = needs_approval ? AL_RUN_PENDING_APPROVAL : AL_RUN_QUEUED;
    rec.price = price;
    rec.cap = al_service_queue_cap(s, settings->concurrency);
    /* held by this node until it is admitted to the queue (below): no
     * node claims it before; if this node dies first, the others give it
     * back to the queue */
    if (!needs_approval)
        snprintf(rec.node_id, sizeof rec.node_id, "%s", s->node_id);
    al_store_approval appr = { 0 };
    if (sp->n_imports) {
        /* /work/documents/FOLDER is the folder's: a thread's document of
         * that top-level name is refused now, not found at the start */
        json_t *docs = al_approval_documents(s, &rec, &err);
        if (!docs || al_folder_clash(docs, sp, &err) < 0)
            ret = run_error(ret_doc, docs ? AL_STATUS_INVALID : AL_STATUS_INTERNAL, docs ? "bad_request" : "internal",
                            "%s", err.msg);
        json_decref(docs);
    }
    if (ret == AL_STATUS_OK && needs_approval) {
        /* the thread's documents as they are now are what the approver sees
         * and what the run gets: pinned, so a version the thread gains
         * before the run starts is not staged in its place */
        json_t *docs = al_approval_documents(s, &rec, &err);
        al_run_spec_record_done(&rec);
        /* and so are its packages: the set the card shows is the set installed */
        if (!docs || al_run_spec_record(sp, via, docs, &rec) < 0 || al_packages_pin(s, sp, &rec) < 0)
            ret = run_error(ret_doc, AL_STATUS_INTERNAL, "internal", "cannot read the thread's documents: %s",
                            docs ? "out of memory" : err.msg);
        else
            ret = approval_card(s, sp, &rec, settings, &appr, ret_doc);
        json_decref(docs);
    }
    /* the pinned home is the run's input: on disk while it waits, counted
     * against the organisation's storage as its other inputs are */
    rec.input_bytes += pinned_bytes;
    if (ret == AL_STATUS_OK)
        ret = record_run(s, p, ex, &rec, needs_approval ? &appr : NULL, tool, ret_doc);
    al_run_spec_record_done(&rec);
    if (ret != AL_STATUS_OK) {
        /* it will not reach a box: nothing of its inputs stays */
        free(appr.card);
        al_rm_rf(dir);
        goto out;
    }
    if (needs_approval) {
        al_governance_audit(s, &rec, "approval.requested", NULL,
                            json_pack("{s:s, s:s, s:s}", "approval_id", appr.id, "hash", appr.hash, "expires_at",
                                      appr.expires_at));
        al_service_append_event(s, run_id, "state", json_pack("{s:s}", "state", "pending_approval"));
        /* the card is the approvals row's (it holds the code): the event
         * names it, read back by al_run_events_after */
        al_service_append_event(s, run_id, "approval", json_pack("{s:s}", "ref", "approval"));
        free(appr.card);
    } else {
        al_service_append_event(s, run_id, "state", json_pack("{s:s}", "state", "queued"));
        al_error qerr = { 0 };
        int qr = al_service_enqueue(s, run_id, p->person_id, p->org_id, settings->concurrency, true, &qerr);
        if (qr < 0) {
            /* never in the queue: ended here (an error, never "canceled":
             * no one canceled it), its inputs removed */
            al_service_end_unqueued(s, run_id, qr == -EIO ? "store" : "queue_full", qerr.msg);
            /* nothing ran: a retry with the key is a new attempt, not this
             * refused run */
            if (idem)
                al_idem_forget(s->store, p, ex->idem, run_id, &err);
            ret = qr == -EIO ? run_error(ret_doc, AL_STATUS_UNAVAILABLE, "store_unavailable", "%s", qerr.msg)
                             : run_error(ret_doc, AL_STATUS_BUSY, "queue_full", "%s", qerr.msg);
            goto out;
        }
    }
    ret = run_answer(s, p, run_id, ex, ret_doc);
out:
    al_settings_done(settings);
    return ret;
}

int al_run_cancel(al_service *s, const al_principal *p, const char *id) {
    al_error err = { 0 };
    al_store_run *row = al_run_load(s, p, id);
    if (!row)
        return -ENOENT;
    bool ended = al_run_state_ended(row->state), pending = row->state == AL_RUN_PENDING_APPROVAL;
    al_store_run_free(row);
    /* withdrawn before anyone decided: the withdrawal and a decision are
     * one transaction each, so only one of them lands; one that lost to an
     * approval cancels the run that is now queued, like any other */
    if (pending && al_service_withdraw(s, id, p->person_id, &err) > 0) {
        al_service_drop_inputs(s, id); /* it will not reach a box */
        return 1;
    }
    return ended ? 0 : al_service_cancel(s, id);
}
