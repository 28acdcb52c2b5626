/* Packages in the service (packages.h). */
#include "packages.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../image/image.h"
#include "../store/packages.h"
#include "governance.h"
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

int al_pkg_set_put(al_pkg_set *set, al_pkg_lang l, const char *spec) {
    char name[AL_RUN_PACKAGE_SPEC_MAX + 1], other[AL_RUN_PACKAGE_SPEC_MAX + 1];
    al_pkg_spec_name(l, spec, name, sizeof name);
    for (size_t i = 0; i < set->n[l]; i++) {
        al_pkg_spec_name(l, set->specs[l][i], other, sizeof other);
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

int al_packages_of_thread(al_service *s, const char *ws_id, const char *thread_id, al_pkg_set *ret, al_error *err) {
    *ret = (al_pkg_set){ 0 };
    al_store_thread_packages *rows = NULL;
    size_t n = 0;
    int r = al_store_thread_packages_get(s->store, ws_id, thread_id, &rows, &n, err);
    for (size_t i = 0; r == 0 && i < n; i++) {
        al_pkg_lang l = (al_pkg_lang)al_name_index(al_pkg_lang_names, _AL_PKG_LANG_MAX, rows[i].lang);
        json_t *specs = json_loads(rows[i].specs, 0, NULL), *e;
        size_t k;
        if ((int)l < 0 || !json_is_array(specs))
            r = al_err(err, "packages", EIO, "thread %s's stored package set is malformed", thread_id);
        /* what the store holds is checked as a request's specs are: a row
         * written by hand never reaches pip as an option */
        json_array_foreach(specs, k, e) if (r == 0) {
            const char *v = json_string_value(e);
            if (!v || !al_pkg_spec_valid(l, v, strlen(v)))
                r = al_err(err, "packages", EIO, "thread %s's stored package set holds a spec that is not one",
                           thread_id);
            else if ((r = al_pkg_set_put(ret, l, v)) < 0)
                r = al_err(err, "packages", -r, "thread %s's package set: %s", thread_id, strerror(-r));
        }
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
    if (strcmp(s->driver->name, "native") != 0)
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
    char images[PATH_MAX + 16], idir[PATH_MAX + 64], digest[65];
    al_error ierr = { 0 };
    al_service_images_dir(&s->cfg, images, sizeof images);
    if (al_image_resolve(images, "installer", idir, sizeof idir, digest, &ierr) < 0)
        REFUSE(AL_STATUS_UNAVAILABLE, "packages_unavailable", "package installs need the installer image, which "
               "this service does not have (%s): an operator builds it with `airlock image build installer`; " TELL,
               ierr.msg, names);
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
