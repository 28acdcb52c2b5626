/* The API's reads, as typed records from the core (views.h). */
#include "views.h"
#include "service_int.h"
#include "checkpoint.h"
#include "folders.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "../store/artifacts.h"
#include "../store/audit.h"
#include "../store/governance.h"
#include "../store/runs.h"
#include "../store/store.h"
#include "../store/tenants.h"

const al_service_config *al_view_config(const al_service *s) { return &s->cfg; }

bool al_view_stopping(al_service *s) {
    pthread_mutex_lock(&s->mu);
    bool st = s->stopping;
    pthread_mutex_unlock(&s->mu);
    return st;
}

int al_view_authenticate(al_service *s, const char *key, al_principal *ret, al_error *err) {
    return al_store_authenticate(s->store, key, ret, err);
}

void al_view_driver_get(al_service *s, bool badges, al_view_driver *ret) {
    *ret = (al_view_driver){ .name = s->driver->name, .badges = badges ? s->driver->capabilities() : NULL,
                             .pool = s->driver->pool ? s->driver->pool() : NULL };
}

void al_view_driver_done(al_view_driver *d) {
    json_decref(d->badges);
    json_decref(d->pool);
    *d = (al_view_driver){ 0 };
}

/* ------------------------------------------------------------------- runs */

al_view_run *al_view_run_load(al_service *s, const al_principal *p, const char *id) { return al_run_load(s, p, id); }

void al_view_run_free(al_view_run *r) { al_store_run_free(r); }

int al_view_runs_page(al_service *s, const al_principal *p, al_run_state state, const char *thread, int64_t before,
                      int64_t limit, al_view_run_brief **ret, size_t *ret_n, al_error *err) {
    al_store_run_filter f = { .ws_id = p->workspace_id, .state = state, .thread_id = thread, .before_seq = before,
                              .limit = limit };
    return al_store_run_list(s->store, &f, ret, ret_n, err);
}

void al_view_run_briefs_free(al_view_run_brief *b, size_t n) { al_store_run_briefs_free(b, n); }

int al_view_runs_find(al_service *s, const al_principal *p, const al_view_run_query *q, al_view_run_brief **ret,
                      size_t *ret_n, al_error *err) {
    al_store_run_filter f = { .ws_id = p->workspace_id, .state = q->state, .thread_id = q->thread_id,
                              .person_id = q->person_id, .via = q->via, .key_id = q->key_id, .before_seq = q->before, .limit = q->limit };
    return al_store_run_list(s->store, &f, ret, ret_n, err);
}

bool al_run_via_valid(const char *via) {
    for (int v = 0; via && v < _AL_VIA_MAX; v++)
        if (strcmp(via, al_run_via_name((al_run_via)v)) == 0)
            return true;
    return false;
}

/* ---------------------------------------------------- people and threads */

int al_view_persons(al_service *s, const al_principal *p, al_view_person **ret, size_t *ret_n, al_error *err) {
    return al_store_people_list(s->store, p->workspace_id, AL_VIEW_PERSONS_MAX, ret, ret_n, err);
}

void al_view_persons_free(al_view_person *v, size_t n) { al_store_people_free(v, n); }

int al_view_threads(al_service *s, const al_principal *p, int64_t before, int64_t limit, al_view_thread **ret,
                    size_t *ret_n, int64_t *ret_more, al_error *err) {
    return al_store_threads_list(s->store, p->workspace_id, before, limit, AL_VIEW_THREADS_SCAN, ret, ret_n, ret_more,
                                 err);
}

/* -------------------------------------------------------------- artifacts */

json_t *al_view_artifact(al_service *s, const char *ws_id, const char *id) {
    al_error err = { 0 };
    al_store_artifact rec;
    if (al_store_artifact_get(s->store, ws_id, id, &rec, &err) < 0)
        return NULL;
    json_t *a = al_artifact_json(&rec);
    al_store_artifact_done(&rec);
    return a;
}

json_t *al_view_thread_artifacts(al_service *s, const char *ws_id, const char *thread, const char *run, bool all,
                                 size_t max, al_error *err) {
    char key[128];
    al_store_artifacts l = { 0 };
    if (al_artifacts_thread_key(thread, run, key, sizeof key) < 0) {
        al_err(err, "artifacts", EINVAL, "bad thread");
        return NULL;
    }
    if (al_store_artifacts_of_thread(s->store, ws_id, key, run, all, max, &l, err) < 0)
        return NULL;
    json_t *rows = al_artifacts_json(&l);
    al_store_artifacts_free(&l);
    return rows;
}

json_t *al_view_artifacts_recent(al_service *s, const char *ws_id, size_t limit, al_error *err) {
    al_store_artifacts l = { 0 };
    if (al_store_artifacts_recent(s->store, ws_id, limit, &l, err) < 0)
        return NULL;
    json_t *rows = al_artifacts_json(&l);
    al_store_artifacts_free(&l);
    return rows;
}

/* ---------------------------------------------------------------- usage */

const char *al_run_via_name(al_run_via v) {
    static const char *const names[_AL_VIA_MAX] = { "rest", "mcp", "piston", "e2b" };
    return v >= 0 && v < _AL_VIA_MAX ? names[v] : NULL;
}

/* The day of U->days that DAY (YYYY-MM-DD) is, or NULL. */
static al_view_usage_day *day_of(al_view_usage *u, const char *day) {
    for (int i = 0; i < AL_USAGE_DAYS; i++)
        if (strcmp(u->days[i].date, day) == 0)
            return &u->days[i];
    return NULL;
}

static void day_language(al_view_usage_day *d, const char *lang, int64_t n) {
    for (size_t i = 0; i < d->nlanguage; i++)
        if (strcmp(d->by_language[i].key, lang) == 0) {
            d->by_language[i].n += n;
            return;
        }
    /* past AL_USAGE_DAY_LANGUAGES, the rest share the last slot, "other" */
    if (d->nlanguage == AL_USAGE_DAY_LANGUAGES + 1) {
        d->by_language[AL_USAGE_DAY_LANGUAGES].n += n;
        return;
    }
    size_t i = d->nlanguage++;
    snprintf(d->by_language[i].key, sizeof d->by_language[i].key, "%s", i == AL_USAGE_DAY_LANGUAGES ? "other" : lang);
    d->by_language[i].n = n;
}

/* The last AL_USAGE_DAYS days (today's included) of P's workspace, each
 * said even when nothing ran. */
static int usage_days(al_service *s, const al_principal *p, al_view_usage *u, al_error *err) {
    time_t now = time(NULL);
    for (int i = 0; i < AL_USAGE_DAYS; i++) {
        time_t t = now - (time_t)(AL_USAGE_DAYS - 1 - i) * 86400;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(u->days[i].date, sizeof u->days[i].date, "%Y-%m-%d", &tm);
    }
    char since[40];
    snprintf(since, sizeof since, "%sT00:00:00.000Z", u->days[0].date);
    al_store_day_count *c = NULL;
    size_t n = 0;
    int r = al_store_runs_by_day(s->store, p->workspace_id, since, &c, &n, err);
    for (size_t i = 0; r == 0 && i < n; i++) {
        al_view_usage_day *d = day_of(u, c[i].day);
        if (!d)
            continue;
        d->runs += c[i].n;
        d->by_state[c[i].state] += c[i].n;
        day_language(d, c[i].language, c[i].n);
        for (int v = 0; v < _AL_VIA_MAX; v++)
            if (strcmp(c[i].via, al_run_via_name((al_run_via)v)) == 0)
                d->by_via[v] += c[i].n;
    }
    free(c);
    al_store_day_credits *k = NULL;
    if (r == 0)
        r = al_store_credits_by_day(s->store, p->workspace_id, since, &k, &n, err);
    for (size_t i = 0; r == 0 && i < n; i++) {
        al_view_usage_day *d = day_of(u, k[i].day);
        if (d)
            d->credits += k[i].credits;
    }
    free(k);
    return r;
}

int al_view_usage_get(al_service *s, const al_principal *p, const char *from, const char *to, int64_t limit,
                      al_view_usage *ret, al_error *err) {
    *ret = (al_view_usage){ 0 };
    /* the caller's workspace's charges and refunds, and the organisation's
     * grants (which explain its balance): never another workspace's runs */
    al_store_ledger_filter f = { .org_id = p->org_id, .workspace_id = p->workspace_id, .from = from, .to = to,
                                 .limit = limit };
    int r = al_store_ledger_list(s->store, &f, &ret->ledger, &ret->nledger, err);
    if (r >= 0)
        r = al_store_runs_by_state(s->store, p->workspace_id, from, to, ret->by_state, err);
    if (r >= 0)
        r = al_store_runs_by_language(s->store, p->workspace_id, from, to, &ret->by_language, &ret->nlanguage, err);
    if (r >= 0)
        r = usage_days(s, p, ret, err);
    if (r < 0) {
        al_view_usage_done(ret);
        return r;
    }
    ret->balance = al_credits_balance(s, p->org_id);
    return 0;
}

void al_view_usage_done(al_view_usage *u) {
    free(u->ledger);
    free(u->by_language);
    *u = (al_view_usage){ 0 };
}

/* ------------------------------------------------------------------ audit */

int al_view_audit_list(al_service *s, const al_principal *p, const al_view_audit_filter *f, al_view_audit_events *ret,
                       al_error *err) {
    /* the caller's workspace's trail only */
    al_store_audit_filter sf = { .workspace_id = p->workspace_id, .kind = f->kind, .person_id = f->person_id,
                                 .run_id = f->run_id, .from = f->from, .to = f->to, .before_seq = f->before_seq,
                                 .limit = f->limit };
    return al_store_audit_list(s->store, &sf, ret, err);
}

void al_view_audit_done(al_view_audit_events *l) { al_store_audit_events_free(l); }

int al_view_audit_verify(al_service *s, const al_principal *p, int64_t max, al_audit_check *ret, bool *ret_signed,
                         al_audit_head *ret_last, al_error *err) {
    *ret_signed = al_checkpointer_last(s, p->workspace_id, ret_last);
    return al_audit_verify_chain(s->store, p->workspace_id, *ret_signed ? ret_last : NULL, max, ret, err);
}

/* -------------------------------------------------------------- settings */

json_t *al_view_settings(al_service *s, const char *ws_id, al_error *err) {
    json_t *eff = al_settings_load(s, ws_id, err);
    if (!eff)
        return NULL;
    /* the pool's state is every tenant's run shapes with live hit and
     * miss counts: the operator's (/operator/status), not a tenant's */
    json_t *badges = s->driver->capabilities();
    json_object_del(json_object_get(badges, "pool"), "state");
    json_object_set_new(eff, "badges", badges);
    json_object_set_new(eff, "service", json_pack("{s:s, s:i, s:i, s:i, s:i}", "driver", s->driver->name, "per_person",
                                                  s->cfg.per_person, "max_concurrent", s->cfg.max_concurrent, "queue_max",
                                                  s->cfg.queue_max, "max_timeout_s", s->cfg.max_timeout_s));
    json_t *modes = json_object();
    for (int m = 0; m < _AL_NET_MODE_MAX; m++) {
        al_net_badge b = al_net_mode_badge((al_net_mode)m);
        /* whether the driver holds the box to this mode is the driver's to say */
        const char *why = NULL;
        bool held = s->driver->net_mode_held && s->driver->net_mode_held((al_net_mode)m, &why);
        /* offline is what the driver itself keeps (a pod's NetworkPolicy, a
         * cloud's switch, a container's none): its own network badge says
         * how, where it has one, not the native box's words */
        json_t *own = json_object_get(badges, "network");
        const char *own_level = json_string_value(json_object_get(own, "level"));
        const char *own_detail = json_string_value(json_object_get(own, "detail"));
        if (held && m == AL_NET_OFFLINE && own_level && own_detail) {
            json_object_set_new(modes, al_net_mode_name((al_net_mode)m),
                                json_pack("{s:s, s:s}", "level", own_level, "detail", own_detail));
            continue;
        }
        json_object_set_new(modes, al_net_mode_name((al_net_mode)m),
                            json_pack("{s:s, s:s}", "level", held ? b.level : "not-enforced", "detail",
                                      held ? b.detail : why ? why : "no runs execute on this service's driver"));
    }
    json_object_set_new(eff, "network_modes", modes);
    return eff;
}

/* --------------------------------------------------------------- figures */

void al_view_figures_get(al_service *s, al_view_figures *ret) {
    *ret = (al_view_figures){ 0 };
    /* read before s->mu is taken: the store's lock comes first where both are held */
    ret->queued = al_service_person_queued(s, NULL);
    al_store_get_stats(s->store, &ret->store);
    ret->store_backend = al_store_backend_name(s->store);
    pthread_mutex_lock(&s->mu);
    ret->boxes_alive = s->active_count;
    ret->runs_started = s->runs_started;
    ret->runs_finished = s->runs_finished;
    ret->layers_removed = s->layers_removed;
    memcpy(ret->duration_buckets, s->duration_buckets, sizeof ret->duration_buckets);
    ret->duration_sum = s->duration_sum;
    pthread_mutex_unlock(&s->mu);
}

int al_view_runs_by_state(al_service *s, int64_t ret[_AL_RUN_STATE_MAX], al_error *err) {
    return al_store_runs_by_state(s->store, NULL, NULL, NULL, ret, err);
}

/* ----------------------------------------------------------------- folders */

json_t *al_view_folders(al_service *s, const al_principal *p, bool with_path, al_error *err) {
    al_store_folder *v = NULL;
    size_t n = 0;
    if (al_store_folders_list(s->store, p->workspace_id, AL_FOLDERS_PER_WORKSPACE, &v, &n, err) < 0)
        return NULL;
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++)
        json_array_append_new(list, al_folder_json(&v[i], with_path));
    al_store_folders_free(v, n);
    return list ? json_pack("{s:o}", "folders", list) : NULL;
}

json_t *al_view_folder_entries(al_service *s, const al_principal *p, const char *name, const char *sub,
                               al_error *err) {
    return al_folder_entries(s->store, p->workspace_id, name, sub, err);
}
