/*
 * The skills' store on disk: bundles by digest under STATE/skills, and
 * their collection once nothing refers to them (skills.c says what may).
 * Below skills.c and the end of a run, which both collect.
 */
#include <dirent.h>
#include <string.h>

#include "service.h"
#include "service_int.h"
#include "skills.h"
#include "../box/collect.h"
#include "../store/skills.h"

void al_skills_root(al_service *s, char *buf, size_t len) { snprintf(buf, len, "%s/skills", s->cfg.state_dir); }

int al_skills_dir(al_service *s, const char *digest, char *buf, size_t len) {
    if (!digest || strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 71 ||
        strspn(digest + 7, "0123456789abcdef") != 64)
        return -EINVAL;
    char root[PATH_MAX];
    al_skills_root(s, root, sizeof root);
    snprintf(buf, len, "%s/sha256-%s", root, digest + 7);
    return 0;
}

static bool stored_name(const char *name, char ret_digest[72]) {
    if (strncmp(name, "sha256-", 7) != 0 || strlen(name) != 71 || strspn(name + 7, "0123456789abcdef") != 64)
        return false;
    snprintf(ret_digest, 72, "sha256:%s", name + 7);
    return true;
}

/* DIGEST is in the set USERDATA (a JSON object). */
static int mark_digest(const char *digest, void *userdata) {
    json_object_set(userdata, digest, json_true());
    return 0;
}

/* al_skills_gc under skills_mu. */
int al_skills_gc_locked(al_service *s, json_t *ret_kept, al_error *err) {
    json_t *held = json_object(), *live = json_object();
    size_t i;
    json_t *b;
    json_array_foreach(s->skills_bundled, i, b) json_object_set(held, json_string_value(json_object_get(b, "digest")),
                                                                 json_true());
    const char *k;
    json_t *v;
    /* a run being created from a bundle keeps it like a live run does:
     * its end (al_skills_run_ended) collects it */
    json_object_foreach(s->skills_pins, k, v) json_object_set(live, k, json_true());
    if (al_store_skill_digests(s->store, mark_digest, held, err) < 0 ||
        al_store_skill_digests_live(s->store, mark_digest, live, err) < 0) {
        /* not knowing what is referenced, remove nothing */
        json_decref(held);
        json_decref(live);
        return -EIO;
    }
    char root[PATH_MAX];
    al_skills_root(s, root, sizeof root);
    int removed = 0;
    DIR *d = opendir(root);
    if (!d) {
        json_decref(held);
        json_decref(live);
        return al_err(err, "skill", errno, "open %s: %m", root);
    }
    struct dirent *de;
    char digest[72];
    /* tmp_* are uploads under way (or a crash's leftovers, which start removes) */
    while ((de = readdir(d)))
        if (stored_name(de->d_name, digest) && !json_object_get(held, digest) && !json_object_get(live, digest)) {
            al_rm_tree(dirfd(d), de->d_name);
            removed++;
        }
    closedir(d);
    bool pending = false;
    json_object_foreach(live, k, v) {
        if (json_object_get(held, k))
            continue;
        pending = true;
        if (ret_kept)
            json_array_append_new(ret_kept, json_string(k));
    }
    s->skills_gc_pending = pending;
    json_decref(held);
    json_decref(live);
    return removed;
}

int al_skills_gc(al_service *s, json_t *ret_kept, al_error *err) {
    pthread_mutex_lock(&s->skills_mu);
    int r = al_skills_gc_locked(s, ret_kept, err);
    pthread_mutex_unlock(&s->skills_mu);
    return r;
}

void al_skills_run_ended(al_service *s) {
    pthread_mutex_lock(&s->skills_mu);
    if (s->skills_gc_pending) {
        al_error err = { 0 };
        if (al_skills_gc_locked(s, NULL, &err) < 0)
            s->skills_gc_pending = true; /* try again at the next end */
    }
    pthread_mutex_unlock(&s->skills_mu);
}
