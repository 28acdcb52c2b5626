/* Packages in the service (packages.h). */
#include "packages.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../drivers/install.h"
#include "../store/packages.h"
#include "governance.h"
#include "sandbox.h"
#include "service_int.h"

void al_pkg_set_free(al_pkg_set *set) {
    if (!set)
        return;
    for (size_t l = 0; l < _AL_PKG_LANG_MAX; l++) {
        for (size_t i = 0; i < set->n[l]; i++)
            free(set->specs[l][i]);
        free(set->specs[l]);
        json_decref(set->resolved[l]);
    }
    *set = (al_pkg_set){ 0 };
}

bool al_pkg_set_any(const al_pkg_set *set) {
    for (size_t l = 0; l < _AL_PKG_LANG_MAX; l++)
        if (set->n[l])
            return true;
    return false;
}

/* The name SPEC installs as its manager compares names, into OUT (LEN
 * bytes): python's PEP 503 form (lower case, each run of - _ . one -), so
 * that Foo_Bar==2 replaces foo-bar==1; node's as written, scope included. */
static void name_key(al_pkg_lang l, const char *spec, char *out, size_t len) {
    char name[AL_RUN_PACKAGE_SPEC_MAX + 1];
    al_pkg_spec_name(l, spec, name, sizeof name);
    size_t o = 0;
    for (const char *c = name; *c && o + 1 < len; c++) {
        if (l != AL_PKG_PYTHON)
            out[o++] = *c;
        else if (*c == '-' || *c == '_' || *c == '.')
            o = o && out[o - 1] == '-' ? o : (out[o] = '-', o + 1);
        else
            out[o++] = *c >= 'A' && *c <= 'Z' ? (char)(*c - 'A' + 'a') : *c;
    }
    out[o] = '\0';
}

int al_pkg_set_put(al_pkg_set *set, al_pkg_lang l, const char *spec) {
    char name[AL_RUN_PACKAGE_SPEC_MAX + 1], other[AL_RUN_PACKAGE_SPEC_MAX + 1];
    name_key(l, spec, name, sizeof name);
    for (size_t i = 0; i < set->n[l]; i++) {
        name_key(l, set->specs[l][i], other, sizeof other);
        if (strcmp(name, other) == 0) {
            free(set->specs[l][i]);
            memmove(&set->specs[l][i], &set->specs[l][i + 1], (set->n[l] - i - 1) * sizeof *set->specs[l]);
            set->n[l]--;
            break;
        }
    }
    if (set->n[l] >= AL_RUN_PACKAGES_MAX)
        return -E2BIG;
    char *c = strdup(spec);
    char **v = c ? realloc(set->specs[l], (set->n[l] + 1) * sizeof *v) : NULL;
    if (!v) {
        free(c);
        return -ENOMEM;
    }
    v[set->n[l]++] = c;
    set->specs[l] = v;
    return 0;
}

json_t *al_pkg_set_json(const al_pkg_set *set, bool with_layer) {
    json_t *o = json_object();
    for (size_t l = 0; o && l < _AL_PKG_LANG_MAX; l++) {
        json_t *a = json_array();
        if (!a || json_object_set_new(o, al_pkg_lang_names[l], a) < 0) {
            json_decref(o);
            return NULL;
        }
        for (size_t i = 0; i < set->n[l]; i++)
            json_array_append_new(a, json_string(set->specs[l][i]));
    }
    if (o && with_layer) {
        json_object_set_new(o, "layer", set->layer[0] ? json_string(set->layer) : json_null());
        json_t *res = json_object();
        for (size_t l = 0; res && l < _AL_PKG_LANG_MAX; l++)
            json_object_set_new(res, al_pkg_lang_names[l],
                                set->resolved[l] ? json_incref(set->resolved[l]) : json_array());
        json_object_set_new(o, "resolved", res ? res : json_null());
    }
    return o;
}

/* The specs of LIST (a JSON array of strings read back from the store or a
 * run's record: stored data, hostile as a request is) put in SET as
 * language L's, each checked as a request's spec is, so that a row written
 * by hand never reaches pip or npm as an option. WHAT names the list in an
 * error. 0, or -errno with ERR (ERRNUM for a spec that is not one). */
static int put_list(al_pkg_set *set, al_pkg_lang l, json_t *list, int errnum, const char *what, al_error *err) {
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        const char *v = json_string_value(e);
        if (!v || !al_pkg_spec_valid(l, v, json_string_length(e)))
            return al_err(err, "packages", errnum, "%s holds a spec that is not one (%s entry %zu)", what,
                          al_pkg_lang_names[l], i);
        int r = al_pkg_set_put(set, l, v);
        if (r < 0)
            return al_err(err, "packages", -r, "%s: %s", what,
                          r == -E2BIG ? "more packages of one language than a set holds" : strerror(-r));
    }
    return 0;
}

int al_packages_of_thread(al_service *s, const char *ws_id, const char *thread_id, al_pkg_set *ret, al_error *err) {
    *ret = (al_pkg_set){ 0 };
    al_store_thread_packages *rows = NULL;
    size_t n = 0;
    int r = al_store_thread_packages_get(s->store, ws_id, thread_id, &rows, &n, err);
    for (size_t i = 0; r == 0 && i < n; i++) {
        al_pkg_lang l = (al_pkg_lang)al_name_index(al_pkg_lang_names, _AL_PKG_LANG_MAX, rows[i].lang);
        json_t *specs = json_loads(rows[i].specs, 0, NULL);
        char what[160];
        snprintf(what, sizeof what, "thread %s's stored package set", thread_id);
        if ((int)l < 0 || !json_is_array(specs))
            r = al_err(err, "packages", EIO, "%s is malformed", what);
        else
            r = put_list(ret, l, specs, EIO, what, err);
        json_decref(specs);
        if (r == 0) {
            snprintf(ret->layer, sizeof ret->layer, "%s", rows[i].layer);
            json_t *res = json_loads(rows[i].resolved, 0, NULL);
            ret->resolved[l] = json_is_array(res) ? res : (json_decref(res), NULL);
        }
    }
    al_store_thread_packages_free(rows, n);
    if (r < 0)
        al_pkg_set_free(ret);
    return r;
}

/* The specs SP asks for, joined with ", ", into BUF: what a refusal tells
 * the agent it could not install. */
static void asked_names(const al_run_spec *sp, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = '\0';
    for (size_t l = 0; l < _AL_PKG_LANG_MAX; l++)
        for (size_t i = 0; i < sp->n_packages[l] && o < len; i++)
            o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? ", " : "", sp->packages[l][i].s);
}

/* The installer image's directory into IDIR (LEN bytes), resolved as at
 * a run's admission and again when its job is built (an image removed
 * between them is found then): 0, or -ENOENT and what to do in ERR. */
static int installer_dir(al_service *s, char *idir, size_t len, al_error *err) {
    char images[PATH_MAX + 16];
    al_error ierr = { 0 };
    al_service_images_dir(&s->cfg, images, sizeof images);
    if (al_install_image(images, idir, len, &ierr) < 0)
        return al_err(err, "packages", ENOENT, "package installs need the installer image, which this service does "
                      "not have (%s): an operator builds it with `airlock image build " AL_INSTALLER_IMAGE "`",
                      ierr.msg);
    return 0;
}

#define TELL "tell the user that the packages (%s) could not be installed, and do not substitute something else"

al_status al_packages_admit(al_service *s, const al_principal *p, const al_settings *st, const al_run_spec *sp,
                            const char **ret_code, char *msg, size_t msglen) {
    if (!al_run_spec_wants_packages(sp))
        return AL_STATUS_OK;
    char names[1024];
    asked_names(sp, names, sizeof names);
#define REFUSE(...) return al_run_refuse(msg, msglen, ret_code, __VA_ARGS__)
    if (!st->package_installs)
        REFUSE(AL_STATUS_INVALID, "packages_disabled", "package installs are disabled on this service: " TELL, names);
    /* only the native driver's helper runs the install box */
    if (!s->driver->installs_packages)
        REFUSE(AL_STATUS_INVALID, "packages_unsupported", "package installs run on the native driver; this service "
               "runs %s", s->driver->name);
    json_t *allowed = json_object_get(st->doc, "network_allowed"), *m;
    if (!al_network_mode_allowed(allowed, AL_NET_PACKAGES)) {
        char modes[128] = "";
        size_t i, o = 0;
        json_array_foreach(allowed, i, m) if (o < sizeof modes)
            o += (size_t)snprintf(modes + o, sizeof modes - o, "%s%s", o ? ", " : "", json_string_value(m) ?: "?");
        REFUSE(AL_STATUS_INVALID, "packages_network_not_allowed", "package installs need the packages network "
               "policy, which this workspace does not allow (%s): " TELL, modes, names);
    }
    char idir[PATH_MAX + 64];
    al_error ierr = { 0 };
    if (installer_dir(s, idir, sizeof idir, &ierr) < 0)
        REFUSE(AL_STATUS_UNAVAILABLE, "packages_unavailable", "%s; " TELL, ierr.msg, names);
    if (!sp->thread_id.s)
        return AL_STATUS_OK;
    /* the thread's set with this run's: within the cap it will be installed under */
    al_pkg_set set;
    al_error err = { 0 };
    if (al_packages_of_thread(s, p->workspace_id, sp->thread_id.s, &set, &err) < 0)
        REFUSE(AL_STATUS_UNAVAILABLE, "store_unavailable", "the thread's packages cannot be read: %s", err.msg);
    int r = 0;
    size_t over = 0;
    for (size_t l = 0; r == 0 && l < _AL_PKG_LANG_MAX; l++)
        for (size_t i = 0; r == 0 && i < sp->n_packages[l]; i++)
            if ((r = al_pkg_set_put(&set, (al_pkg_lang)l, sp->packages[l][i].s)) == -E2BIG)
                over = l;
    al_pkg_set_free(&set);
    if (r == -E2BIG)
        REFUSE(AL_STATUS_INVALID, "bad_request", "thread %s's environment would hold more than %d %s packages: a "
               "thread's set keeps every package its runs asked for (a later version of one replaces it)",
               sp->thread_id.s, AL_RUN_PACKAGES_MAX, al_pkg_lang_names[over]);
    if (r < 0)
        REFUSE(AL_STATUS_INTERNAL, "internal", "out of memory");
#undef REFUSE
    return AL_STATUS_OK;
}

al_status al_packages_admit_for(al_service *s, const al_principal *p, const al_run_spec *sp, const char **ret_code,
                                char *msg, size_t msglen) {
    al_settings st;
    al_error err = { 0 };
    if (!al_run_spec_wants_packages(sp))
        return AL_STATUS_OK;
    if (al_settings_get(s, p->workspace_id, &st, &err) < 0)
        return al_run_refuse(msg, msglen, ret_code, AL_STATUS_UNAVAILABLE, "settings_unavailable", "%s", err.msg);
    al_status r = al_packages_admit(s, p, &st, sp, ret_code, msg, msglen);
    al_settings_done(&st);
    return r;
}

/* Whether thread THREAD_ID's set (WS_ID's) holds every spec SP asks, as
 * written: its layer has them, nothing is installed. */
static bool thread_holds(al_service *s, const char *ws_id, const al_run_spec *sp) {
    al_pkg_set set;
    al_error err = { 0 };
    if (!sp->thread_id.s || al_packages_of_thread(s, ws_id, sp->thread_id.s, &set, &err) < 0)
        return false;
    bool all = set.layer[0] != '\0';
    for (size_t l = 0; all && l < _AL_PKG_LANG_MAX; l++)
        for (size_t i = 0; all && i < sp->n_packages[l]; i++) {
            bool found = false;
            for (size_t k = 0; !found && k < set.n[l]; k++)
                found = strcmp(set.specs[l][k], sp->packages[l][i].s) == 0;
            all = found;
        }
    al_pkg_set_free(&set);
    return all;
}

int64_t al_packages_price(al_service *s, const al_principal *p, const al_run_spec *sp, int64_t price) {
    if (price <= 0 || !al_run_spec_wants_packages(sp) || thread_holds(s, p->workspace_id, sp))
        return price;
    int64_t t = sp->limits.timeout_s > 0 ? sp->limits.timeout_s : 1;
    int64_t install = s->cfg.package_install_timeout_s;
    return price + price * ((install + t - 1) / t);
}

json_t *al_packages_card(al_service *s, const char *ws_id, const al_run_spec *sp) {
    al_pkg_set set = { 0 }, asked = { 0 };
    al_error err = { 0 };
    /* unreadable now: the card shows what was asked (the start reads the
     * thread's set again, and refuses if it cannot) */
    if (sp->thread_id.s && al_packages_of_thread(s, ws_id, sp->thread_id.s, &set, &err) < 0)
        set = (al_pkg_set){ 0 };
    for (size_t l = 0; l < _AL_PKG_LANG_MAX; l++)
        for (size_t i = 0; i < sp->n_packages[l]; i++) {
            al_pkg_set_put(&set, (al_pkg_lang)l, sp->packages[l][i].s);
            al_pkg_set_put(&asked, (al_pkg_lang)l, sp->packages[l][i].s);
        }
    json_t *card = al_pkg_set_any(&set) ? al_pkg_set_json(&set, false) : NULL;
    if (card)
        json_object_set_new(card, "asked", al_pkg_set_json(&asked, false));
    al_pkg_set_free(&set);
    al_pkg_set_free(&asked);
    return card;
}

json_t *al_packages_thread_view(al_service *s, const char *ws_id, const char *thread_id, al_error *err) {
    al_pkg_set set;
    if (al_packages_of_thread(s, ws_id, thread_id, &set, err) < 0)
        return NULL;
    json_t *doc = al_pkg_set_json(&set, true);
    al_pkg_set_free(&set);
    if (!doc) {
        al_err(err, "packages", ENOMEM, "out of memory");
        return NULL;
    }
    json_object_set_new(doc, "thread_id", json_string(thread_id));
    return doc;
}

int al_packages_pin(al_service *s, const al_run_spec *sp, al_store_run *rec) {
    json_t *card = al_packages_card(s, rec->workspace_id, sp);
    if (!card)
        return 0;
    json_object_del(card, "asked");
    json_t *ins = json_loads(rec->inputs ? rec->inputs : "{}", 0, NULL);
    char *text = NULL;
    if (json_is_object(ins) && json_object_set_new(ins, "packages_pinned", card) == 0)
        text = json_dumps(ins, JSON_COMPACT);
    else
        json_decref(card);
    json_decref(ins);
    if (!text)
        return -ENOMEM;
    free(rec->inputs);
    rec->inputs = text;
    return 0;
}

/* The set pinned in RUN's record (INS: its inputs) when it waited for an
 * approval, into *RET: 1, or 0 when none was pinned, or -errno. */
static int pinned_set(json_t *ins, al_pkg_set *ret, al_error *err) {
    json_t *pin = json_object_get(ins, "packages_pinned");
    if (!json_is_object(pin))
        return 0;
    int r = 0;
    for (size_t l = 0; r == 0 && l < _AL_PKG_LANG_MAX; l++)
        r = put_list(ret, (al_pkg_lang)l, json_object_get(pin, al_pkg_lang_names[l]), EINVAL,
                     "the run's pinned packages", err);
    return r < 0 ? r : 1;
}

/* The set RUN's job carries into *RET: when INSTALLS (the workspace's
 * installs on, the native driver) the set pinned at its request when it
 * waited for an approval, else its thread's; then what it asked over it
 * (admitted when it was requested). */
static int job_set(al_service *s, const al_store_run *run, bool installs, al_pkg_set *ret, al_error *err) {
    *ret = (al_pkg_set){ 0 };
    json_t *ins = run->inputs ? json_loads(run->inputs, 0, NULL) : NULL;
    /* approved: exactly what its card showed */
    int r = installs ? pinned_set(ins, ret, err) : 0;
    if (r != 0) {
        json_decref(ins);
        if (r < 0)
            al_pkg_set_free(ret);
        return r < 0 ? r : 0;
    }
    if (installs && run->thread_id[0] && al_packages_of_thread(s, run->workspace_id, run->thread_id, ret, err) < 0) {
        json_decref(ins);
        return -EIO;
    }
    json_t *pk = json_object_get(ins, "packages");
    /* checked at admission; read back from the store, checked again */
    for (size_t l = 0; r == 0 && l < _AL_PKG_LANG_MAX; l++)
        r = put_list(ret, (al_pkg_lang)l, json_object_get(pk, al_pkg_lang_names[l]), EINVAL,
                     "the thread's set with the run's recorded packages", err);
    json_decref(ins);
    if (r < 0)
        al_pkg_set_free(ret);
    return r;
}

/* What J's install step is given beside its specs. */
static int job_install(al_service *s, const al_settings *st, al_job *j, al_error *err) {
    char layers[PATH_MAX + 16], idir[PATH_MAX + 64];
    snprintf(layers, sizeof layers, "%s/layers", s->cfg.state_dir);
    if (mkdir(layers, 0700) < 0 && errno != EEXIST)
        return al_err(err, "packages", errno, "mkdir %s: %m", layers);
    int r = installer_dir(s, idir, sizeof idir, err);
    if (r < 0)
        return r;
    if (al_job_set(&j->pkg_layers_dir, layers) < 0 || al_job_set(&j->pkg_installer_dir, idir) < 0 ||
        al_job_set(&j->pkg_index_python, s->cfg.package_index_python) < 0 ||
        al_job_set(&j->pkg_registry_node, s->cfg.package_registry_node) < 0 ||
        /* the registries' policy (package_registries), checked at start */
        al_job_set(&j->pkg_network, s->pkg_network) < 0)
        return -ENOMEM;
    j->pkg_scripts = st->package_scripts;
    al_box_limits l;
    al_box_limits_default(&l);
    l.wall_ms = (uint64_t)s->cfg.package_install_timeout_s * 1000;
    l.memory_bytes = (uint64_t)s->cfg.package_install_memory_mb << 20;
    l.cpu_millis = 1000;
    /* the install writes its tree to /out: room for the layer's caps */
    l.tmpfs_bytes = (uint64_t)s->cfg.package_layer_max_mb << 20;
    l.tmpfs_inodes = (uint64_t)s->cfg.package_layer_max_files + 1024;
    j->pkg_limits = l;
    j->pkg_layer_max_bytes = (uint64_t)s->cfg.package_layer_max_mb << 20;
    j->pkg_layer_max_files = (uint64_t)s->cfg.package_layer_max_files;
    return 0;
}

int al_packages_job(al_service *s, const al_store_run *run, al_job *j, al_error *err) {
    al_settings st;
    int r = al_settings_get(s, run->workspace_id, &st, err);
    if (r < 0)
        return r;
    al_pkg_set set;
    /* installs turned off since: the thread's set is not installed (its
     * layer kept), and a run that asked was refused at admission */
    r = job_set(s, run, st.package_installs && s->driver->installs_packages, &set, err);
    if (r == 0 && al_pkg_set_any(&set)) {
        for (size_t i = 0; r == 0 && i < set.n[AL_PKG_PYTHON]; i++)
            r = al_job_add_pkg_python(j, set.specs[AL_PKG_PYTHON][i]);
        for (size_t i = 0; r == 0 && i < set.n[AL_PKG_NODE]; i++)
            r = al_job_add_pkg_node(j, set.specs[AL_PKG_NODE][i]);
        if (r < 0)
            r = al_err(err, "packages", -r, "the job's packages: %s", strerror(-r));
        else
            r = job_install(s, &st, j, err);
    }
    al_pkg_set_free(&set);
    al_settings_done(&st);
    return r;
}

/* The thread's set RUN's job J installed, over the set the thread has now
 * (another run of the thread may have added to it since J was built: the
 * union is kept, the later spec of a name winning) into *RET; the layer is
 * LAYER when the union is J's set exactly, else "" (the next run installs
 * the whole union). */
static int union_with_job(al_service *s, const al_store_run *run, const al_job *j, const char *layer, al_pkg_set *ret,
                          al_error *err) {
    int r = al_packages_of_thread(s, run->workspace_id, run->thread_id, ret, err);
    if (r < 0)
        return r;
    char *const *specs[_AL_PKG_LANG_MAX] = { j->pkg_python, j->pkg_node };
    size_t n[_AL_PKG_LANG_MAX] = { j->n_pkg_python, j->n_pkg_node };
    bool same = true;
    for (size_t l = 0; r == 0 && l < _AL_PKG_LANG_MAX; l++) {
        for (size_t i = 0; r == 0 && i < n[l]; i++)
            if ((r = al_pkg_set_put(ret, (al_pkg_lang)l, specs[l][i])) < 0)
                r = al_err(err, "packages", -r, "the thread's set: %s", r == -E2BIG ? "more than 32 of one "
                           "language" : strerror(-r));
        same = same && ret->n[l] == n[l];
    }
    snprintf(ret->layer, sizeof ret->layer, "%s", same ? layer : "");
    return r;
}

int al_packages_installed(al_service *s, const al_store_run *run, const al_job *j, json_t *installed, al_error *err) {
    const char *layer = json_string_value(json_object_get(installed, "layer"));
    if (!run->thread_id[0] || !al_job_has_packages(j))
        return 0;
    if (!layer || strlen(layer) >= sizeof(((al_pkg_set *)0)->layer))
        return al_err(err, "packages", EBADMSG, "the helper's installed event names no layer");
    /* read, union, write as one unit under the thread's lock: two runs of
     * the thread ending their installs at once would each write the union
     * of the set as it was with their own, and one's packages be lost */
    int r = al_store_begin(s->store, err);
    if (r < 0)
        return r;
    al_pkg_set set = { 0 };
    if ((r = al_store_thread_packages_lock(s->store, run->workspace_id, run->thread_id, err)) == 0)
        r = union_with_job(s, run, j, layer, &set, err);
    for (size_t l = 0; r == 0 && l < _AL_PKG_LANG_MAX; l++) {
        if (!set.n[l])
            continue;
        json_t *a = json_array();
        for (size_t i = 0; a && i < set.n[l]; i++)
            json_array_append_new(a, json_string(set.specs[l][i]));
        /* what the box's helper said is hostile data: kept as JSON text
         * when it is a list (bounded by the event's own cap), else none */
        json_t *res = json_object_get(installed, al_pkg_lang_names[l]);
        al_store_thread_packages row = { .specs = a ? json_dumps(a, JSON_COMPACT) : NULL, .layer = set.layer,
                                         .resolved = json_is_array(res) ? json_dumps(res, JSON_COMPACT) : strdup("[]") };
        snprintf(row.lang, sizeof row.lang, "%s", al_pkg_lang_names[l]);
        al_store_now(row.updated_at, sizeof row.updated_at);
        r = row.specs && row.resolved ? al_store_thread_packages_put(s->store, run->org_id, run->workspace_id,
                                                                     run->thread_id, &row, err)
                                      : al_err(err, "packages", ENOMEM, "out of memory");
        free(row.specs);
        free(row.resolved);
        json_decref(a);
    }
    al_pkg_set_free(&set);
    if (r < 0) {
        al_store_rollback(s->store);
        return r;
    }
    return al_store_commit(s->store, err);
}

al_status al_packages_of_metadata(json_t *metadata, al_run_spec *sp, char *msg, size_t msglen, const char **code) {
    json_t *v = json_object_get(metadata, AL_SANDBOX_META_PACKAGES);
    if (!v)
        return AL_STATUS_OK;
    /* metadata values are strings (E2B's rule, checked at create) */
    json_t *o = json_is_string(v) ? json_loadb(json_string_value(v), json_string_length(v), 0, NULL) : NULL;
    if (!json_is_object(o)) {
        json_decref(o);
        return al_run_refuse(msg, msglen, code, AL_STATUS_INVALID, "bad_request",
                             "metadata." AL_SANDBOX_META_PACKAGES " must be a JSON string of an object {\"python\": "
                             "[specs], \"node\": [specs]}");
    }
    al_status st = al_run_spec_packages_of(sp, o, msg, msglen, code);
    json_decref(o);
    if (st == AL_STATUS_OK && (st = al_run_spec_check_packages(sp, msg, msglen, code)) != AL_STATUS_OK) {
        /* the check's words, said of the metadata key they came in */
        char why[1024];
        snprintf(why, sizeof why, "%s", msg);
        snprintf(msg, msglen, "metadata." AL_SANDBOX_META_PACKAGES ": %s", why);
    }
    return st;
}

const char *al_packages_install_failure(json_t *result) {
    const char *reason = json_string_value(json_object_get(result, "reason"));
    if (!reason || strcmp(reason, al_reason_name(AL_REASON_INSTALL_FAILED)) != 0)
        return NULL;
    return json_string_value(json_object_get(json_object_get(result, "error"), "message")) ?: "the install failed";
}
