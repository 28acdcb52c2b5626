/*
 * The runner: one thread per active run, which claims it, checks it
 * against its workspace's settings of now, starts its box through the
 * driver, pumps the helper's events (output redacted and paced) and writes
 * the box's end (its result, artifacts and tool.call); what follows that
 * write is every run's end (run_end.c). The scheduler that starts runners
 * is scheduler.c; the queue is queue.c.
 */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "../image/image.h"
#include "dlp.h"
#include "helper_events.h"
#include "packages.h"
#include "run_job.h"
#include "run_end.h"
#include "run_output.h"
#include "runner.h"
#include "run_session.h"
#include "sandbox_run.h"
#include "service.h"
#include "service_int.h"
#include "skills.h"
#include "../store/approvals.h"
#include "../store/nodes.h"

/* ---------------------------------------------------------------- runner */

static al_run_state state_of(json_t *result) {
    const char *reason = json_string_value(json_object_get(result, "reason"));
    if (!reason)
        return AL_RUN_ERROR;
    if (strcmp(reason, "exited") == 0) {
        json_t *code = json_object_get(result, "exit_code");
        return json_is_integer(code) && json_integer_value(code) == 0 ? AL_RUN_SUCCEEDED : AL_RUN_FAILED;
    }
    if (strcmp(reason, "timeout") == 0)
        return AL_RUN_TIMED_OUT;
    if (strcmp(reason, "memory") == 0 || strcmp(reason, "pids") == 0 || strcmp(reason, "output_limit") == 0)
        return AL_RUN_KILLED;
    if (strcmp(reason, "canceled") == 0)
        return AL_RUN_CANCELED;
    /* the packages asked for could not be installed (a name no index has,
     * a build that failed, a cap): the request's failure, as a script's
     * non-zero exit is, charged; no box was made */
    if (strcmp(reason, al_reason_name(AL_REASON_INSTALL_FAILED)) == 0)
        return AL_RUN_FAILED;
    return AL_RUN_ERROR;
}

typedef struct runner_arg {
    al_service *s;
    active_run *a;
} runner_arg;

void al_test_pause(const char *name) {
#ifdef AIRLOCK_TEST_HOOKS
    const char *ms = getenv(name);
    if (ms)
        usleep((useconds_t)strtoul(ms, NULL, 10) * 1000);
#else
    (void)name;
#endif
}

/* The tool.call audit event of RUN, ended in STATE_NAME with RESULT (NULL:
 * none) after DURATION_MS, its output redacted REDACTIONS times: what ran,
 * how it ended and what it reached. */
static void audit_call(al_service *s, const al_store_run *run, const char *state_name, json_t *result,
                       int64_t duration_ms, int redactions) {
    /* what ran: the code and every input, hashed as an approval binds
     * them (the same value as the card's hash where there was one); null
     * when the inputs cannot be read back, never the code's alone */
    char input_hash[65] = "";
    al_error merr = { 0 };
    json_t *manifest = al_approval_manifest(s, run, &merr);
    if (manifest)
        al_approval_hash(run, manifest, input_hash);
    json_decref(manifest);
    char preview[513] = "";
    if (result) {
        const char *o = json_string_value(json_object_get(result, "stdout"));
        const char *e = json_string_value(json_object_get(result, "stderr"));
        snprintf(preview, sizeof preview, "%s%s", o ? o : "", e ? e : "");
        /* cut on a character: a script that prints a multi-byte character
         * across byte 512 must not make its own tool.call event unbuildable */
        al_utf8_fix(preview);
    }
    json_t *exit_code = result ? json_object_get(result, "exit_code") : NULL;
    json_t *ins = al_json_text(run->inputs);
    json_t *skill = json_object_get(ins, "skill");
    /* what the egress log says, in brief; the log itself is in the result */
    json_int_t egress_conns = 0, egress_bytes = 0, egress_denied = 0;
    size_t ei;
    json_t *ev;
    json_array_foreach(json_object_get(json_object_get(result, "network"), "egress"), ei, ev) {
        egress_conns++;
        egress_denied += strcmp(json_string_value(json_object_get(ev, "decision")) ?: "", "allowed") != 0;
        egress_bytes += json_integer_value(json_object_get(ev, "bytes_up")) +
                        json_integer_value(json_object_get(ev, "bytes_down"));
    }
    json_t *data = json_pack("{s:s, s:s, s:s, s:s?, s:O, s:s, s:s, s:I, s:s?, s:s, s:{s:I, s:I, s:I}, s:s, s:i}",
                             "tool", skill ? "run_skill_script" : "code_execution", "via",
                             json_string_value(json_object_get(ins, "via")) ?: "rest", "invocation_id", run->id,
                             "input_sha256", input_hash[0] ? input_hash : NULL,
                             "exit_code", exit_code ? exit_code : json_null(), "output_preview", preview,
                             "language", run->language, "duration_ms", (json_int_t)duration_ms, "network",
                             run->network, "image_digest", run->image[0] ? run->image : "host",
                             "egress", "connections", egress_conns, "denied", egress_denied, "bytes", egress_bytes,
                             "state", state_name, "redactions", redactions);
    /* what of the connected folders it was given: each file as pinned
     * (folder, path, size, sha256), the bytes the start checked */
    json_t *imports = json_object_get(ins, "imports");
    if (data && json_is_array(imports) && json_array_size(imports))
        json_object_set(data, "imports", imports);
    /* the packages its box had, as the install resolved them (the layer,
     * each package's name, version and digest): what ran, beyond the code */
    json_t *pk = json_object_get(result, "packages");
    if (data && json_is_object(pk))
        json_object_set(data, "packages", pk);
    al_governance_audit(s, run, "tool.call", NULL, data);
    json_decref(ins);
}

/* A's end is written (or was another's): what is left is cleanup, which a
 * drain does not wait for. Said before the end is published: a client
 * that saw the result and stopped the service at once found its run still
 * counted as running. */
static void settle(al_service *s, active_run *a) {
    pthread_mutex_lock(&s->mu);
    a->settled = true;
    pthread_mutex_unlock(&s->mu);
}

/* 1 its end was written, 0 the run had ended otherwise (or this node was
 * declared dead), -errno it could not be written; A settled unless -errno. */
static int end_run(al_service *s, active_run *a, const al_store_run *run, al_run_state state, json_t *result,
                   const char *err_code, const char *err_msg, const char *dir, al_dlp *dlp, output_pace *op,
                   int64_t duration_ms) {
    const char *run_id = run->id;
    al_error err = { 0 };
    /* a node declared dead publishes nothing: the others ended its runs
     * (error, refunded) and a result now would contradict theirs */
    pthread_mutex_lock(&s->mu);
    bool dead = s->declared_dead;
    pthread_mutex_unlock(&s->mu);
    if (dead)
        return 0;
    /* nothing unredacted is stored where the agent can read it */
    int redactions = al_output_redact(dlp, result);
    json_t *published = NULL, *previews = NULL, *skipped = json_array();
    if (result) {
        json_t *sk = json_object_get(result, "skipped");
        if (sk)
            json_array_extend(skipped, sk);
        char out[PATH_MAX + 64];
        snprintf(out, sizeof out, "%s/out", dir);
        if (json_array_size(json_object_get(result, "artifacts")) == 0) {
            /* the box reported no file: nothing to ingest (and no need of
             * the organisation's quota and usage, two reads of the store) */
            published = json_array();
            previews = json_array();
        } else if (al_artifacts_ingest(s, run, out, result, &published, &previews, skipped, &err) < 0 && !err_code) {
            state = AL_RUN_ERROR;
            err_code = "artifacts";
            err_msg = err.msg;
        }
    }
    const char *state_name = al_run_state_name(state);
    char now[40];
    al_store_now(now, sizeof now);
    /* recorded before the run is seen to end, so whoever sees the end
     * finds the record */
    audit_call(s, run, state_name, result, duration_ms, redactions);
    json_t *exit_code = result ? json_object_get(result, "exit_code") : NULL;
    al_store_analytics an = { .state = state,
                              .exit_code = json_is_integer(exit_code) ? (int64_t)json_integer_value(exit_code) : -1,
                              .duration_ms = duration_ms };
    snprintf(an.run_id, sizeof an.run_id, "%s", run_id);
    snprintf(an.org_id, sizeof an.org_id, "%s", run->org_id);
    snprintf(an.workspace_id, sizeof an.workspace_id, "%s", run->workspace_id);
    snprintf(an.language, sizeof an.language, "%s", run->language);
    snprintf(an.created_at, sizeof an.created_at, "%s", now);
    al_store_analytics_put(s->store, &an, &err);
    bool in_result[2];
    int64_t events_bytes = 0;
    al_output_in_result(result, op, in_result, &events_bytes);
    json_t *summary = al_run_result_summary(result);
    al_store_run fin = { .stored_bytes = events_bytes, .state = state, .result = al_result_text(result),
                         .previews = previews ? json_dumps(previews, JSON_COMPACT) : NULL,
                         .skipped = json_dumps(skipped, JSON_COMPACT), .error_message = (char *)err_msg,
                         .redactions = redactions,
                         .result_summary = summary ? json_dumps(summary, JSON_COMPACT) : NULL,
                         .preview_count = (int64_t)json_array_size(previews),
                         .skipped_count = (int64_t)json_array_size(skipped) };
    json_decref(summary);
    snprintf(fin.id, sizeof fin.id, "%s", run_id);
    snprintf(fin.error_code, sizeof fin.error_code, "%s", err_code ? err_code : "");
    snprintf(fin.finished_at, sizeof fin.finished_at, "%s", now);
    /* a sandbox's run: what its box left in /work and /out becomes the
     * sandbox's, before anyone is told it ended (the next command, or
     * files.read after wait(), finds it) */
    if (result && al_sandbox_run_flow_back(s, run, dir, result, &err) < 0)
        al_service_log(s, AL_LOG_WARN, "sandbox.flow_back_failed",
                       json_pack("{s:s, s:s}", "run_id", run_id, "error", err.msg));
    /* test builds: a service killed between the run's tool.call and its end */
    al_test_pause("AIRLOCK_TEST_FINISH_PAUSE_MS");
    int written = al_store_run_finish(s->store, &fin, &err);
    if (written >= 0)
        settle(s, a);
    if (written == 0) {
        /* ended meanwhile by another node (this one was thought dead) */
        al_service_log(s, AL_LOG_WARN, "run.end_superseded", json_pack("{s:s}", "run_id", run_id));
    } else {
        /* written, the result holds the output now: the events that
         * carried the same bytes give theirs up (read back from it); not
         * written (the store away?), the end is said as it stands */
        for (int i = 0; written > 0 && i < 2; i++)
            if (in_result[i])
                al_store_events_drop_output(s->store, run_id, i ? "stderr" : "stdout", &err);
        /* its slot is its runner's to free (runner_main tells the others) */
        al_run_ended(s, run_id, run,
                     &(al_run_end){ .state = state, .error_code = err_code, .result = result,
                                    .published = published, .charged = written > 0 });
    }
    json_decref(published);
    json_decref(previews);
    json_decref(skipped);
    free(fin.result);
    free(fin.previews);
    free(fin.skipped);
    free(fin.result_summary);
    return written;
}

/* Why the tools RUN (a runs row) needs are no longer on the allow-list of
 * SETTINGS, or NULL: a skill's run needs run_skill_script, the test bench
 * code_execution too, any other run code_execution. */
static const char *tool_withdrawn(const al_settings *settings, const al_store_run *run) {
    json_t *ins = al_json_text(run->inputs);
    json_t *sk = json_object_get(ins, "skill");
    bool skill = json_is_object(sk);
    bool bench = skill && strcmp(json_string_value(json_object_get(sk, "mode")) ?: "", "test") == 0;
    json_decref(ins);
    bool code = settings->tools & AL_TOOL_BIT(AL_TOOL_CODE_EXECUTION);
    bool skills = settings->tools & AL_TOOL_BIT(AL_TOOL_RUN_SKILL_SCRIPT);
    if (skill && !skills)
        return "run_skill_script was taken off this workspace's tool allow-list before the run started";
    if ((!skill || bench) && !code)
        return "code_execution was taken off this workspace's tool allow-list before the run started";
    return NULL;
}

static bool stopping_now(al_service *s) {
    pthread_mutex_lock(&s->mu);
    bool st = s->stopping;
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Run A, claimed here, did not start and its end could not be written
 * (the store was away): it goes back to the queue, for any node, once the
 * store answers; its runner holds its slot meanwhile. A node that stops
 * gives its claims back as it leaves, and one declared dead has them
 * given back by the others. */
static void give_back(al_service *s, active_run *a) {
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool stop = s->stopping || s->declared_dead;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            return;
        al_error err = { 0 };
        int r = al_store_run_release(s->store, a->run_id, s->node_id, a->cap, &err);
        if (r >= 0) {
            pthread_mutex_lock(&s->mu);
            s->queue_gen += r > 0;
            pthread_mutex_unlock(&s->mu);
            if (r > 0)
                al_service_log(s, AL_LOG_INFO, "run.given_back", json_pack("{s:s}", "run_id", a->run_id));
            return;
        }
        for (int i = 0; i < 10 && !stopping_now(s); i++)
            nanosleep(&(struct timespec){ .tv_nsec = 100 * 1000 * 1000 }, NULL);
    }
}

/* What a runner holds of its run from its claim to its end. */
typedef struct runner {
    al_service *s;
    active_run *a;
    char dir[PATH_MAX + 64];
    uint64_t t0;
    al_store_run *run;            /* NULL until read */
    al_settings settings;         /* what it was checked against: its DLP patterns too */
    bool checked;                 /* SETTINGS was read */
    al_job job;
    json_t *docs_skipped;         /* the result's, not the helper's */
    json_t *result;
    al_driver_run dr;
    al_dlp *dlp;
    al_dlp_stream streams[2];
    al_dlp_stream install_streams[2]; /* the install's: lines held whole as the run's are */
    output_pace pace;
    al_run_state final;
    const char *ecode, *emsg;     /* the end's error, if any (emsg may point at emsg_buf) */
    char emsg_buf[600];
    /* whether the run is past this node's claim: started, ended, or moved
     * by another; else it goes back to the queue (give_back) */
    bool settled;
    const al_driver_ops *sweep_after;
} runner;

/* Where a step leaves the run: on to the next step, to its end (an error
 * in R->ecode, or the box's result), or nothing of it is this runner's to
 * end (canceled meanwhile, stopped, or not claimed after all). */
typedef enum { STEP_ON, STEP_END, STEP_LEAVE } step;

/* End R's run with CODE and a message (printf), before its box ran. */
static step refuse(runner *r, const char *code, const char *fmt, ...) _printf_(3, 4);
static step refuse(runner *r, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->emsg_buf, sizeof r->emsg_buf, fmt, ap);
    va_end(ap);
    r->ecode = code;
    r->emsg = r->emsg_buf;
    return STEP_END;
}

/* Why the run, still queued as READ, may not start under its workspace's
 * settings of now (a workspace whose driver was switched off, a tool taken
 * off the allow-list, a host taken off network_hosts while it waited for a
 * slot or an approval): it does not start, and is not charged. */
static step check_queued(runner *r, al_store_run *pre) {
    al_error serr = { 0 };
    const al_settings *st = &r->settings;
    const char *why;
    if (al_settings_get(r->s, pre->workspace_id, &r->settings, &serr) < 0)
        /* settings that cannot be read do not start a run (fail closed) */
        return refuse(r, "settings_unavailable", "%s", serr.msg);
    r->checked = true;
    if (st->disabled)
        return refuse(r, "driver_disabled", "code execution was disabled for this workspace before the run started");
    if ((why = tool_withdrawn(st, pre)))
        return refuse(r, "tool_not_allowed", "%s", why);
    al_net_policy *np = malloc(sizeof *np);
    if (!np || al_net_policy_parse(pre->network, np, &serr) < 0 ||
        al_settings_network_check(st->doc, np, &serr) < 0) {
        free(np);
        return refuse(r, "network_not_allowed", "%s", np ? serr.msg : "out of memory");
    }
    free(np);
    return STEP_ON;
}

/* The claim made good: queued -> provisioning and the charge, in one
 * transaction, unless it was canceled in between. PRE: the row as read
 * while it was queued (NULL: read again after the charge). */
static step claim(runner *r, al_store_run *pre) {
    al_service *s = r->s;
    active_run *a = r->a;
    /* canceled between the queue and here: it never starts; stopped (airlock's
     * own stop): it stays queued, and the node's leave gives it back */
    pthread_mutex_lock(&s->mu);
    bool canceled_early = a->cancel_requested, stopped_early = a->stop_requested;
    pthread_mutex_unlock(&s->mu);
    if (stopped_early && !canceled_early) {
        al_store_run_free(pre);
        return STEP_LEAVE;
    }
    if (canceled_early && al_service_finish_canceled_queued(s, a->run_id) > 0) {
        r->settled = true;
        al_store_run_free(pre);
        return STEP_LEAVE;
    }
    char now[40];
    al_error err = { 0 };
    al_store_now(now, sizeof now);
    int n = al_store_run_charge(s->store, a->run_id, s->node_id, now, &err);
    /* started (its end is the runner's, or unheld_here's), or moved by
     * another (canceled): nothing of it is this node's to give back */
    r->settled = n >= 0;
    if (pre) {
        /* the row as read while it was queued, and what the charge wrote
         * (its state and started_at) or, not charged, as it was: nothing
         * else of a run's row changes on the way (not read again) */
        r->run = pre;
        if (n > 0) {
            r->run->state = AL_RUN_PROVISIONING;
            snprintf(r->run->started_at, sizeof r->run->started_at, "%s", now);
        }
    } else {
        al_error gerr = { 0 };
        if (al_store_run_get(s->store, a->run_id, NULL, &r->run, &gerr) < 0)
            r->run = NULL;
    }
    if (n > 0 && !r->run) {
        /* charged, and then unreadable: it cannot start; ended and refunded */
        al_service_lose_run(s, a->run_id, "the run could not be read back after it was charged");
        return STEP_LEAVE;
    }
    if (n == 0 || !r->run)
        return STEP_LEAVE;
    if (n < 0)
        return n == -ENOSPC ? refuse(r, "payment_required", "the organisation's credits do not cover this run")
                            : refuse(r, "provisioning", "%s", err.msg);
    al_service_state_event(s, a->run_id, "provisioning");
    return STEP_ON;
}

/* What the box may not start without: its workspace's DLP patterns
 * (settings that cannot be read, or patterns that do not compile, end it),
 * and, for an approved run, exactly what was approved: the code and every
 * input, read again now (files and stdin as stored, the pinned documents
 * as the store has them), hashed as the card was. A store that cannot say
 * whether there was an approval refuses. */
static step check_started(runner *r) {
    al_service *s = r->s;
    al_error serr = { 0 };
    if (!r->checked && al_settings_get(s, r->run->workspace_id, &r->settings, &serr) < 0)
        return refuse(r, "settings_unavailable", "%s", serr.msg);
    r->checked = true;
    if (al_dlp_new(json_object_get(r->settings.doc, "dlp_patterns"), &r->dlp, &serr) < 0) {
        r->dlp = NULL;
        return refuse(r, "dlp", "%s", serr.msg);
    }
    for (int i = 0; i < 2; i++)
        r->streams[i].dlp = r->install_streams[i].dlp = r->dlp;
    al_store_approval appr;
    al_error aerr = { 0 }, err = { 0 }; /* none is no error: most runs have no approval */
    int ar = al_store_approval_get(s->store, r->a->run_id, &appr, &aerr);
    if (ar < 0 && ar != -ENOENT)
        return refuse(r, "approval", "cannot read the run's approval");
    if (ar == 0) {
        al_store_approval_done(&appr);
        char h[65] = "";
        json_t *manifest = al_approval_manifest(s, r->run, &err);
        if (manifest)
            al_approval_hash(r->run, manifest, h);
        /* and the documents' bytes are the versions named */
        if (manifest && al_approval_verify_documents(s, manifest, &err) < 0)
            h[0] = '\0';
        json_decref(manifest);
        if (!h[0] || appr.decision != AL_DECISION_APPROVED || strcmp(h, appr.hash) != 0)
            return refuse(r, "approval", "the run differs from what was approved (its code or inputs changed)");
    }
    return STEP_ON;
}

/* The job of R's run (staged in its directory) built and handed to the
 * driver: 0 with R's job, skipped documents and driver run, or -errno
 * with ERR (a provisioning failure). The skipped documents are the
 * result's, not the helper's: kept out of the job, whose size
 * al_run_spec_check bounded without them. */
static int build_job(al_service *s, runner *r, al_error *ret_err) {
    al_error err = { 0 };
    if (al_run_job_build(s, r->run, r->dir, &r->job, &r->docs_skipped, &err) < 0) {
        *ret_err = err;
        return -EINVAL;
    }
    al_driver_run dr = { .pid = -1, .events_fd = -1, .job_fd = -1 };
    int rc = s->driver->start(s->self_exe, &r->job, &dr, &err);
    if (rc < 0) {
        if (!err.msg[0])
            al_err(&err, "provisioning", -rc, "%s", strerror(-rc));
        *ret_err = err;
        return rc;
    }
    r->dr = dr;
    /* its packages are installed (or their layer found) before its box:
     * a phase of provisioning the run's followers are told of */
    if (al_job_has_packages(&r->job))
        al_service_append_event(s, r->a->run_id, "phase", json_pack("{s:s}", "phase", "installing"));
    return 0;
}

/* The box started: R holds it (a cancel asked before this one held the
 * box is in a->cancel_requested: asked here, or on another node and heard
 * by the watcher (the run is in s->active from its claim, before anyone
 * may ask: a cancel is asked of a run provisioning or running); a
 * notification the watcher missed while it reconnected is read again then
 * (asked_cancels), so the store is not asked once more per run here). */
static step start(runner *r) {
    al_service *s = r->s;
    al_error err = { 0 };
    if (build_job(s, r, &err) < 0) {
        /* a folder's file that is not the one pinned (and approved) names
         * itself: the run ends with that reason, not a provisioning fault */
        const char *why = strcmp(err.step, "folder_changed") == 0 ? "folder_changed"
                          : strcmp(err.step, "folder") == 0        ? "folder"
                                                                   : "provisioning";
        return refuse(r, why, "%s", err.msg);
    }
    pthread_mutex_lock(&s->mu);
    r->a->dr = r->dr;
    bool cancel = r->a->cancel_requested || r->a->stop_requested;
    pthread_mutex_unlock(&s->mu);
    if (cancel)
        s->driver->cancel(&r->a->dr);
    return STEP_ON;
}

/* Redacted install output (RED, RN bytes) as an "installing" event of
 * stream I (0 stdout, 1 stderr). */
static void installing_event(runner *r, int i, const char *red, size_t rn) {
    if (!red || !rn)
        return;
    json_t *ev = json_pack("{s:s}", "stream", i == 0 ? "stdout" : "stderr");
    if (ev && al_output_set(ev, "data", red, rn) == 0)
        al_service_append_event(r->s, r->a->run_id, "installing", ev);
    else
        json_decref(ev);
}

/* A piece of the install step's output: held back to the end of its line
 * and redacted, as the run's output is. Redacting each piece alone let a
 * secret written in two pieces (a build script's two writes) pass whole
 * to the reader, who joins the events. */
static void installing_output(runner *r, const al_helper_event *he) {
    if (!he->data || (he->stream != 1 && he->stream != 2) || !r->dlp)
        return;
    int i = he->stream - 1;
    size_t rn = 0;
    char *red = al_dlp_stream_feed(&r->install_streams[i], he->data, he->len, &rn);
    installing_event(r, i, red, rn);
    free(red);
}

/* The install's last partial lines, once it has ended (installed, or the
 * helper's end when it failed). */
static void installing_flush(runner *r) {
    for (int i = 0; i < 2; i++) {
        size_t rn = 0;
        char *red = r->install_streams[i].dlp && r->install_streams[i].len
                        ? al_dlp_stream_flush(&r->install_streams[i], &rn) : NULL;
        installing_event(r, i, red, rn);
        free(red);
    }
}

/* The packages' layer is ready (EV: the helper's "installed" event): its
 * followers are told, and the run's thread's set is now the job's, in that
 * layer (the next run of the thread mounts it). */
static void installed(runner *r, json_t *ev) {
    al_error err = { 0 };
    if (!json_is_object(ev))
        return;
    json_t *doc = json_deep_copy(ev);
    if (doc) {
        json_object_del(doc, "type");
        al_service_append_event(r->s, r->a->run_id, "installed", doc);
    }
    if (al_packages_installed(r->s, r->run, &r->job, ev, &err) < 0)
        al_service_log(r->s, AL_LOG_WARN, "packages.record_failed",
                       json_pack("{s:s, s:s}", "run_id", r->a->run_id, "error", err.msg));
}

/* The helper's events, to its end: the run's state, its output (held back
 * to the end of a line, redacted, paced) and its result. Its error, if it
 * said one, in *RET_HELPER_ERROR. */
static void pump(runner *r, json_t **ret_helper_error) {
    al_service *s = r->s;
    al_error err = { 0 };
    FILE *ev = fdopen(r->dr.events_fd, "r");
    char *line = NULL;
    size_t cap = 0;
    ssize_t ln;
    while (ev && (ln = getline(&line, &cap, ev)) > 0) {
        al_helper_event he;
        switch (al_helper_event_parse(line, (size_t)ln, &he)) {
        case AL_HELPER_EVENT_STARTED:
            al_store_run_move(s->store, r->a->run_id, AL_RUN_PROVISIONING, AL_RUN_RUNNING, &err);
            al_service_state_event(s, r->a->run_id, "running");
            break;
        case AL_HELPER_EVENT_STDOUT:
        case AL_HELPER_EVENT_STDERR: {
            /* bytes, held back to the end of their line, then redacted */
            int i = he.kind == AL_HELPER_EVENT_STDOUT ? 0 : 1;
            size_t rn = 0;
            char *red = he.data ? al_dlp_stream_feed(&r->streams[i], he.data, he.len, &rn) : NULL;
            if (red)
                al_pace_output(s, r->a->run_id, &r->pace, i, red, rn);
            free(red);
            break;
        }
        case AL_HELPER_EVENT_INSTALLING:
            installing_output(r, &he);
            break;
        case AL_HELPER_EVENT_INSTALLED:
            installing_flush(r);
            installed(r, he.value);
            break;
        case AL_HELPER_EVENT_RESULT:
            json_decref(r->result);
            r->result = json_incref(he.value);
            break;
        case AL_HELPER_EVENT_ERROR:
            json_decref(*ret_helper_error);
            *ret_helper_error = json_incref(he.value);
            break;
        default:
            break;
        }
        al_helper_event_clear(&he);
    }
    free(line);
    pthread_mutex_lock(&s->mu);
    r->a->dr.pid = -1;
    pthread_mutex_unlock(&s->mu);
    if (ev) {
        fclose(ev);
        r->dr.events_fd = -1;
    }
}

/* How the box's run ended, from its RESULT, or from the helper's exit
 * status ST and HELPER_ERROR when it left none. */
static void judge(runner *r, int st, json_t *helper_error) {
    al_service *s = r->s;
    json_t *result = r->result;
    pthread_mutex_lock(&s->mu);
    bool stopped = r->a->stop_requested && !r->a->cancel_requested;
    pthread_mutex_unlock(&s->mu);
    if (!result) {
        refuse(r, "helper", "the run's helper ended without a result (%s %d)%s%s", WIFSIGNALED(st) ? "signal" : "exit",
               WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), helper_error ? ": " : "",
               helper_error ? json_string_value(json_object_get(helper_error, "message")) : "");
        /* a helper killed outright (by an operator, the OOM killer) could
         * not remove its box's cgroup or container: its uid is free now,
         * so they are leftovers, removed now rather than at the next start
         * (once the run has ended and its slot is free: the daemon may
         * take seconds) */
        r->sweep_after = s->driver;
        return;
    }
    r->final = state_of(result);
    if (r->final == AL_RUN_CANCELED && stopped) {
        /* killed by airlock's own stop, not by whoever asked for it:
         * an error of airlock's (refunded), and said so */
        r->final = AL_RUN_ERROR;
        json_object_set_new(result, "reason", json_string("service_stopped"));
        refuse(r, "service_stopped", "the service stopped before this run ended (its stop_grace_s of %d s "
                                     "ran out, or it was told to stop at once); not charged", s->cfg.stop_grace_s);
    }
    json_t *ds = r->docs_skipped, *rs = json_object_get(result, "skipped");
    if (json_array_size(ds) && json_is_array(rs))
        json_array_extend(rs, ds);
    else if (json_array_size(ds))
        json_object_set(result, "skipped", ds);
    json_t *e = json_object_get(result, "error");
    if (r->final == AL_RUN_ERROR && e)
        refuse(r, "box", "step %s: %s", json_string_value(json_object_get(e, "step")),
               json_string_value(json_object_get(e, "message")));
}

/* R's output streams' last bytes, redacted and paced out. */
static void flush_output(runner *r) {
    al_service *s = r->s;
    for (int i = 0; i < 2; i++) {
        size_t rn = 0;
        char *red = r->streams[i].dlp ? al_dlp_stream_flush(&r->streams[i], &rn) : NULL;
        if (red && rn)
            al_pace_output(s, r->a->run_id, &r->pace, i, red, rn);
        free(red);
        al_pace_flush(s, r->a->run_id, &r->pace, i);
    }
}

/* The box runs: its events pumped to its end, its output flushed, how it
 * ended judged. */
static void run_box(runner *r) {
    al_service *s = r->s;
    json_t *helper_error = NULL;
    pump(r, &helper_error);
    int st = s->driver->wait(&r->dr);
    installing_flush(r);
    flush_output(r);
    judge(r, st, helper_error);
    json_decref(helper_error);
}

/* A chunk of a session call's output: as a box's (pump). */
static void session_output(void *ud, int i, const char *data, size_t n) {
    runner *r = ud;
    size_t rn = 0;
    char *red = al_dlp_stream_feed(&r->streams[i], data, n, &rn);
    if (red)
        al_pace_output(r->s, r->a->run_id, &r->pace, i, red, rn);
    free(red);
}

/* The run executed in sandbox ID's session box (run_session.h): running
 * once its request is in, its output as a box's, its end the agent's. */
static void run_in_session(runner *r, const char *id) {
    al_service *s = r->s;
    al_error err = { 0 };
    al_store_run_move(s->store, r->a->run_id, AL_RUN_PROVISIONING, AL_RUN_RUNNING, &err);
    al_service_state_event(s, r->a->run_id, "running");
    json_t *res = al_run_session_call(s, r->a, r->run, id, session_output, r, &err);
    flush_output(r);
    if (!res) {
        refuse(r, "session_box", "%s", err.msg);
        return;
    }
    r->result = res;
    judge(r, 0, NULL);
}

/* The runner leaves: its run given back if it was not settled, what it
 * held freed, and its slot too; A is taken off s->active. */
static void leave(runner *r) {
    al_service *s = r->s;
    active_run *a = r->a;
    if (!r->settled)
        give_back(s, a);
    al_settings_done(&r->settings);
    for (int i = 0; i < 2; i++) {
        free(r->streams[i].pending);
        free(r->install_streams[i].pending);
        free(r->pace.b[i].buf);
    }
    al_dlp_free(r->dlp);
    al_rm_rf(r->dir);
    json_decref(r->result);
    json_decref(r->docs_skipped);
    al_job_free(&r->job);
    al_store_run_free(r->run);
    /* its followers woken and the other nodes told, while this runner still
     * counts as active: once it does not, al_service_stop may return and
     * the service and its store be freed under it (LeakSanitizer's build
     * saw this thread read the freed store at shutdown on PostgreSQL) */
    al_service_wake_run(s, a->run_id);
    /* the person's slot is free on every node (its end is in the store) */
    al_cluster_notify(s, AL_NOTIFY_QUEUE, "");
    pthread_mutex_lock(&s->mu);
    for (active_run **pp = &s->active; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    s->active_count--;
    s->runs_finished++;
    double secs = (double)(al_now_ms() - r->t0) / 1000.0;
    static const double bounds[12] = { 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 1e18 };
    for (int i = 0; i < 12; i++)
        if (secs <= bounds[i])
            s->duration_buckets[i]++;
    s->duration_sum += secs;
    s->slot_gen++;
    pthread_cond_broadcast(&s->sched_cond);
    pthread_mutex_unlock(&s->mu);
    free(a);
}

/* A run's runner: claim, check, start, pump, finish. */
static void *runner_main(void *p) {
    runner_arg *ra = p;
    runner rs = { .s = ra->s, .a = ra->a, .t0 = al_now_ms(), .final = AL_RUN_ERROR }, *r = &rs;
    free(ra);
    al_service *s = r->s;
    snprintf(r->dir, sizeof r->dir, "%s/%s", s->runs_dir, r->a->run_id);
    al_pace_init(&r->pace);
    al_job_init(&r->job);
    al_error err = { 0 };
    al_store_run *pre = NULL;
    if (al_store_run_get(s->store, r->a->run_id, NULL, &pre, &err) == 0 && pre->state != AL_RUN_QUEUED) {
        al_store_run_free(pre);
        pre = NULL;
    }
    step at = pre ? check_queued(r, pre) : STEP_ON;
    if (at == STEP_END)
        r->run = pre;
    else
        at = claim(r, pre);
    if (at == STEP_ON)
        at = check_started(r);
    char sandbox[32];
    if (at == STEP_ON && al_run_session_wanted(s, &r->settings, r->run, sandbox, sizeof sandbox)) {
        /* settings refuse the two together; a run approved before they
         * changed is refused here, not run against files never approved */
        if (r->settings.approval_policy != AL_APPROVAL_NEVER)
            at = refuse(r, "session_box", "the sandbox's calls share a session box, whose files an approval cannot "
                        "bind, and the workspace's approval_policy is not never");
        else
            run_in_session(r, sandbox);
        at = STEP_END;
    }
    if (at == STEP_ON)
        at = start(r);
    if (at == STEP_ON) {
        run_box(r);
        at = STEP_END;
    }
    if (at == STEP_END &&
        end_run(s, r->a, r->run, r->final, r->result, r->ecode, r->emsg, r->dir, r->dlp, &r->pace,
                (int64_t)(al_now_ms() - r->t0)) >= 0) {
        r->settled = true;
        settle(s, r->a);
    }
    const al_driver_ops *sweep_after = r->sweep_after;
    leave(r);
    /* the service may be gone by now: the driver's ops are static (and a
     * stop does not wait for this sweep: cut short by the exit, what it
     * would have removed is the next start's) */
    if (sweep_after) {
        /* test builds: a sweep as slow as a busy daemon's */
        al_test_pause("AIRLOCK_TEST_SWEEP_PAUSE_MS");
        sweep_after->sweep();
    }
    return NULL;
}

int al_runner_start(al_service *s, active_run *a) {
    runner_arg *ra = calloc(1, sizeof *ra);
    if (!ra)
        return -ENOMEM;
    ra->s = s;
    ra->a = a;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int r = pthread_create(&t, &attr, runner_main, ra);
    pthread_attr_destroy(&attr);
    if (r != 0)
        free(ra);
    return -r;
}
