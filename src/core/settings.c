/*
 * A workspace's settings as rules, with no store and no HTTP: the defaults,
 * the shape every stored row must have, and a PUT /v1/settings body applied
 * over what the workspace set. governance.c reads and writes the rows
 * around these; tests/fuzz/fuzz_settings.c drives them with hostile bodies.
 */
#include "settings.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dlp.h"
#include "../util/json_keys.h"

#define SECRETS_MAX 32
#define SECRET_VALUE_MAX 4096
#define DLP_PATTERNS_MAX 32
#define DLP_PATTERN_LEN_MAX 512

static const char *const tool_names[] = { "code_execution", "run_skill_script" };

static bool in_list(const char *v, const char *const *list, size_t n) {
    for (size_t i = 0; v && i < n; i++)
        if (strcmp(v, list[i]) == 0)
            return true;
    return false;
}

static int num_in(json_t *v, double min, double max, const char *key, al_error *err) {
    if (!json_is_number(v) || json_number_value(v) < min || json_number_value(v) > max)
        return al_err(err, "settings", EINVAL, "%s must be a number from %g to %g", key, min, max);
    return 0;
}

bool al_network_mode_allowed(json_t *allowed, al_net_mode mode) {
    size_t i;
    json_t *m;
    json_array_foreach(allowed, i, m) if (json_is_string(m) && strcmp(json_string_value(m), al_net_mode_name(mode)) == 0)
        return true;
    return false;
}

int al_settings_network_check(json_t *settings, const al_net_policy *np, al_error *err) {
    json_t *allowed = json_object_get(settings, "network_allowed");
    if (!al_network_mode_allowed(allowed, np->mode))
        return al_err(err, "network", EPERM, "network mode %s is not allowed in this workspace (settings network_allowed)",
                      al_net_mode_name(np->mode));
    /* hosts+packages reaches the registries too: packages must be allowed */
    if (np->mode == AL_NET_HOSTS && np->with_packages && !al_network_mode_allowed(allowed, AL_NET_PACKAGES))
        return al_err(err, "network", EPERM, "hosts+packages reaches the package registries, and mode packages is not "
                      "allowed in this workspace (settings network_allowed)");
    if (np->mode != AL_NET_HOSTS)
        return 0;
    /* the names are the workspace's to list, not the run's: a request
     * narrows the list (names a subset), never widens it */
    json_t *listed = json_object_get(settings, "network_hosts");
    for (size_t i = 0; i < np->n_hosts; i++) {
        bool found = false;
        size_t k;
        json_t *h;
        json_array_foreach(listed, k, h) found |= json_is_string(h) && strcmp(json_string_value(h), np->hosts[i]) == 0;
        if (!found)
            return al_err(err, "network", EPERM, json_array_size(listed)
                          ? "host %s is not in this workspace's allowed hosts (settings network_hosts): a run may name "
                            "only hosts an admin listed there"
                          : "host %s: this workspace allows no hosts (settings network_hosts is empty; an admin lists "
                            "the hosts runs may reach there)", np->hosts[i]);
    }
    return 0;
}

/* NAMES (a settings network_hosts value) checked and in canonical form
 * (lower case, no trailing dot), as al_net_policy_parse spells them; NULL
 * with ERR when one is not a host name policy allows. */
static json_t *network_hosts_canonical(json_t *names, al_error *err) {
    if (!json_is_array(names) || json_array_size(names) > AL_NET_MAX_HOSTS) {
        al_err(err, "settings", EINVAL, "network_hosts must be a list of at most %d host names", AL_NET_MAX_HOSTS);
        return NULL;
    }
    json_t *out = json_array();
    al_net_policy *np = malloc(sizeof *np);
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n) {
        char spec[AL_NET_NAME_MAX + 8];
        const char *v = json_string_value(n);
        if (!np || !v || !*v || strlen(v) >= AL_NET_NAME_MAX || strchr(v, ',')) {
            al_err(err, "settings", EINVAL, "network_hosts[%zu] must be a host name (a.example)", i);
            goto fail;
        }
        snprintf(spec, sizeof spec, "hosts:%s", v);
        if (al_net_policy_parse(spec, np, err) < 0 || np->n_hosts != 1) {
            al_err(err, "settings", EINVAL, "network_hosts[%zu] is not a host name a policy allows", i);
            goto fail;
        }
        json_array_append_new(out, json_string(np->hosts[0]));
    }
    free(np);
    return out;
fail:
    free(np);
    json_decref(out);
    return NULL;
}

json_t *al_settings_defaults(const al_settings_bounds *b) {
    json_t *d = json_pack("{s:s, s:[s, s, s], s:s, s:i, s:i, s:i, s:f, s:i, s:s, s:i, s:i, s:[s, s], s:[]}", "driver",
                          b->driver, "network_allowed", "offline", "packages", "hosts", "network", "offline",
                          "timeout_s", 60 < b->max_timeout_s ? 60 : b->max_timeout_s, "max_timeout_s",
                          b->max_timeout_s, "memory_mb", 512, "cpus", 0.5, "concurrency", b->per_person,
                          "approval_policy", "never", "approval_ttl_s", 3600, "price_per_run", AL_PRICE_PER_RUN_DEFAULT,
                          "tools", tool_names[0], tool_names[1], "dlp_patterns");
    /* no host a run may name until an admin lists it (fail closed) */
    json_object_set_new(d, "network_hosts", json_array());
    /* separation of duties: a requester does not decide their own run */
    json_object_set_new(d, "allow_self_approval", json_false());
    /* how long a run's code, output and events are kept after it ends
     * (its summary and audit events stay): 30 days */
    json_object_set_new(d, "run_retention_s", json_integer(AL_RUN_RETENTION_DEFAULT_S));
    /* an E2B sandbox lives an hour at most unless an admin allows more */
    json_object_set_new(d, "sandbox_max_timeout_s", json_integer(AL_SANDBOX_TIMEOUT_DEFAULT_MAX_S));
    /* each E2B command and runCode a fresh box (files kept, processes not):
     * the session box (one box per sandbox, holding state between calls)
     * is not built yet, so the setting exists, shows false, and true is
     * refused (al_settings_apply) rather than accepted and ignored */
    json_object_set_new(d, "e2b_session_box", json_false());
    /* packages a run asks for: installed into the thread's environment, or
     * refused (the service's default; docs/api.md) */
    json_object_set_new(d, "package_installs", json_string(b->package_installs ? "thread" : "off"));
    json_object_set_new(d, "package_install_scripts", json_string(b->package_scripts ? "box" : "refuse"));
    return d;
}

/* Every setting the service acts on has the shape PUT checks: a row that
 * parses but holds, say, "approval_policy": "ALWAYS" must not read as
 * "never" where the code compares strings. */
bool al_settings_sane(json_t *eff) {
    static const char *const strings[] = { "driver", "network" };
    static const char *const numbers[] = { "timeout_s", "max_timeout_s", "memory_mb", "cpus", "concurrency",
                                           "approval_ttl_s", "price_per_run", "run_retention_s",
                                           "sandbox_max_timeout_s" };
    static const char *const lists[] = { "network_allowed", "network_hosts", "tools" };
    static const char *const policies[] = { "never", "always", "high_risk" };
    for (size_t i = 0; i < ELEMENTSOF(strings); i++)
        if (!json_is_string(json_object_get(eff, strings[i])))
            return false;
    for (size_t i = 0; i < ELEMENTSOF(numbers); i++)
        if (!json_is_number(json_object_get(eff, numbers[i])))
            return false;
    for (size_t i = 0; i < ELEMENTSOF(lists); i++) {
        json_t *l = json_object_get(eff, lists[i]), *v;
        size_t k;
        if (!json_is_array(l))
            return false;
        json_array_foreach(l, k, v) if (!json_is_string(v)) return false;
    }
    if (!in_list(json_string_value(json_object_get(eff, "approval_policy")), policies, ELEMENTSOF(policies)))
        return false;
    if (!json_is_boolean(json_object_get(eff, "allow_self_approval")) ||
        !json_is_boolean(json_object_get(eff, "e2b_session_box")))
        return false;
    static const char *const installs[] = { "off", "thread" }, *const scripts[] = { "refuse", "box" };
    if (!in_list(json_string_value(json_object_get(eff, "package_installs")), installs, ELEMENTSOF(installs)) ||
        !in_list(json_string_value(json_object_get(eff, "package_install_scripts")), scripts, ELEMENTSOF(scripts)))
        return false;
    json_t *d = json_object_get(eff, "dlp_patterns"), *v;
    size_t k;
    if (!json_is_array(d))
        return false;
    json_array_foreach(d, k, v) if (!json_is_string(json_object_get(v, "name")) || !json_is_string(json_object_get(v, "pattern")))
        return false;
    return true;
}

int al_settings_body_check(json_t *body, al_error *err) {
    if (!json_is_object(body))
        return al_err(err, "settings", EINVAL, "the body must be a JSON object");
    if (json_object_get(body, "network_hosts")) {
        /* checked and canonical before anything compares against it */
        json_t *canon = network_hosts_canonical(json_object_get(body, "network_hosts"), err);
        if (!canon)
            return -EINVAL;
        json_object_set_new(body, "network_hosts", canon);
    }
    return 0;
}

/* The default policy of runs that name none (V): valid, and one of the
 * allowed modes (BODY's new list if it sets one, else EFF's). */
static int check_network(json_t *body, json_t *eff, json_t *v, al_error *err) {
    int r = 0;
    /* the default policy of runs that name none: valid, and one of
     * the allowed modes (the new list if this PUT sets one) */
    al_net_policy *np = malloc(sizeof *np);
    json_t *allowed = json_object_get(body, "network_allowed");
    if (!allowed)
        allowed = json_object_get(eff, "network_allowed");
    if (!np)
        r = -ENOMEM;
    else if (!json_is_string(v))
        r = al_err(err, "settings", EINVAL, "network must be a policy string (offline, packages, internet, hosts:a,b)");
    else if ((r = al_net_policy_parse(json_string_value(v), np, err)) == 0 &&
             !al_network_mode_allowed(allowed, np->mode))
        r = al_err(err, "settings", EINVAL, "network: mode %s is not in network_allowed", al_net_mode_name(np->mode));
    free(np);
    return r;
}

/* The modes runs may ask for (V): known ones, the default's among them. */
static int check_network_allowed(json_t *body, json_t *eff, json_t *v, al_error *err) {
    int r = 0;
    size_t i;
    json_t *m;
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > _AL_NET_MODE_MAX)
        r = al_err(err, "settings", EINVAL, "network_allowed must be a list of modes (offline, packages, hosts, internet)");
    json_array_foreach(v, i, m) {
        bool known = false;
        for (int k = 0; k < _AL_NET_MODE_MAX; k++)
            known |= json_is_string(m) && strcmp(json_string_value(m), al_net_mode_name((al_net_mode)k)) == 0;
        if (r == 0 && !known)
            r = al_err(err, "settings", EINVAL, "network_allowed: unknown mode (offline, packages, hosts, internet)");
    }
    /* the default policy must stay allowed */
    json_t *def = json_object_get(body, "network") ?: json_object_get(eff, "network");
    al_net_policy *np = r == 0 ? malloc(sizeof *np) : NULL;
    al_error ignore;
    if (np && json_is_string(def) && al_net_policy_parse(json_string_value(def), np, &ignore) == 0 &&
        !al_network_mode_allowed(v, np->mode))
        r = al_err(err, "settings", EINVAL, "network_allowed must include the default network's mode (%s)",
                   al_net_mode_name(np->mode));
    free(np);
    return r;
}

/* The workspace's DLP patterns (V): named, bounded, each one compiles. */
static int check_dlp_patterns(json_t *v, al_error *err) {
    int r = 0;
    size_t i;
    json_t *p;
    if (!json_is_array(v) || json_array_size(v) > DLP_PATTERNS_MAX)
        r = al_err(err, "settings", EINVAL, "dlp_patterns must be an array of at most %d", DLP_PATTERNS_MAX);
    static const char *const pattern_keys[] = { "name", "pattern" };
    json_array_foreach(v, i, p) {
        const char *name = json_string_value(json_object_get(p, "name"));
        const char *pat = json_string_value(json_object_get(p, "pattern"));
        const char *extra = al_json_unknown_key(p, pattern_keys, ELEMENTSOF(pattern_keys));
        if (r < 0)
            break;
        if (extra) {
            r = al_err(err, "settings", EINVAL, "unknown field \"%.64s\" in dlp_patterns[%zu] (it takes: name, "
                       "pattern)", extra, i);
            break;
        }
        if (!name || !pat || strlen(name) == 0 || strlen(name) > 40 || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(name) ||
            strlen(pat) == 0 || strlen(pat) > DLP_PATTERN_LEN_MAX)
            r = al_err(err, "settings", EINVAL, "dlp_patterns[%zu]: want {name: [a-z0-9_]{1,40}, pattern: 1-%d bytes}",
                       i, DLP_PATTERN_LEN_MAX);
        else if (al_dlp_check_pattern(pat, err) < 0)
            r = -EINVAL;
    }
    return r;
}

/* The secrets' changes (V: name to value, null deletes) applied to SEC. */
static int apply_secrets(json_t *sec, json_t *v, al_error *err) {
    int r = 0;
    const char *k;
    json_t *sv;
    if (!json_is_object(v))
        r = al_err(err, "settings", EINVAL, "secrets must be an object of names to values");
    json_object_foreach(v, k, sv) {
        if (r < 0)
            break;
        if (json_is_null(sv))
            json_object_del(sec, k);
        else if (!json_is_string(sv) || json_string_length(sv) > SECRET_VALUE_MAX || strlen(k) == 0 || strlen(k) > 64)
            r = al_err(err, "settings", EINVAL, "secrets.%s: want a string of at most %d bytes (null deletes)", k,
                       SECRET_VALUE_MAX);
        else
            json_object_set(sec, k, sv);
    }
    if (r == 0 && json_object_size(sec) > SECRETS_MAX)
        r = al_err(err, "settings", EINVAL, "at most %d secrets", SECRETS_MAX);
    return r;
}

/* The default policy of runs that name none must be one a run could ask
 * for under the new settings (EFF updated with CUR; its hosts listed too). */
static int check_default_network(json_t *eff, json_t *cur, al_error *err) {
    int r = 0;
    json_t *view = json_deep_copy(eff);
    json_object_update(view, cur);
    al_net_policy *np = malloc(sizeof *np);
    al_error nerr = { 0 };
    const char *def = json_string_value(json_object_get(view, "network"));
    if (!view || !np)
        r = -ENOMEM;
    else if (al_net_policy_parse(def, np, &nerr) < 0 || al_settings_network_check(view, np, &nerr) < 0)
        r = al_err(err, "settings", EINVAL, "the default network %s would not be allowed: %s", def ? def : "?",
                   nerr.msg);
    free(np);
    json_decref(view);
    return r;
}

/* A session box's /work is its own and live: an approval, which binds a
 * command's code and the sandbox's files as they are in home/, could not
 * bind what the box holds. So the two do not go together (the settings as
 * they will be: CUR's over EFF's). */
static int check_session_approvals(json_t *eff, json_t *cur, al_error *err) {
    json_t *sb = json_object_get(cur, "e2b_session_box"), *pol = json_object_get(cur, "approval_policy");
    sb = sb ? sb : json_object_get(eff, "e2b_session_box");
    pol = pol ? pol : json_object_get(eff, "approval_policy");
    if (json_is_true(sb) && strcmp(json_string_value(pol) ?: "never", "never") != 0)
        return al_err(err, "settings", EINVAL, "e2b_session_box and approval_policy %s do not go together: a session "
                      "box's files are its own and live, so an approval could not bind what a call reads; keep "
                      "approval_policy never, or the session box off", json_string_value(pol));
    return 0;
}

int al_settings_apply(const al_settings_bounds *b, json_t *cur, json_t *sec, json_t *body, al_error *err) {
    int r0 = al_settings_body_check(body, err);
    if (r0 < 0)
        return r0;
    json_t *eff = al_settings_defaults(b);
    if (!eff)
        return al_err(err, "settings", ENOMEM, "out of memory");
    json_object_update(eff, cur);
    if (b->has_price)
        json_object_set_new(eff, "price_per_run", json_integer(b->price));
    int r = al_settings_sane(eff) ? 0
                               : al_err(err, "settings", EBADMSG, "the workspace's stored settings are corrupt (a setting "
                                        "of the wrong type or value): they are not changed over; an operator must "
                                        "repair the row");
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        if (r < 0)
            break;
        if (strcmp(key, "driver") == 0) {
            static const char *const d[] = { "native", "docker", "disabled" };
            if (!in_list(json_string_value(v), d, 3))
                r = al_err(err, "settings", EINVAL, "driver must be native, docker or disabled");
            else if (strcmp(json_string_value(v), "disabled") != 0 && strcmp(json_string_value(v), b->driver) != 0)
                r = al_err(err, "settings", EINVAL, "this service's driver is %s: a workspace cannot enable %s",
                           b->driver, json_string_value(v));
        } else if (strcmp(key, "network") == 0) {
            r = check_network(body, eff, v, err);
        } else if (strcmp(key, "network_allowed") == 0) {
            r = check_network_allowed(body, eff, v, err);
        } else if (strcmp(key, "network_hosts") == 0) {
            r = 0; /* checked above; the default network is checked against it below */
        } else if (strcmp(key, "max_timeout_s") == 0) {
            r = num_in(v, 1, b->max_timeout_s, key, err);
        } else if (strcmp(key, "timeout_s") == 0) {
            json_t *mx = json_object_get(body, "max_timeout_s");
            r = num_in(v, 1, mx && json_is_number(mx) ? json_number_value(mx)
                                                       : json_number_value(json_object_get(eff, "max_timeout_s")),
                       key, err);
        } else if (strcmp(key, "memory_mb") == 0) {
            r = num_in(v, 16, b->max_memory_mb, key, err);
        } else if (strcmp(key, "cpus") == 0) {
            r = num_in(v, 0.01, b->max_cpus, key, err);
        } else if (strcmp(key, "concurrency") == 0) {
            r = num_in(v, 1, b->per_person, key, err);
        } else if (strcmp(key, "approval_policy") == 0) {
            static const char *const p[] = { "never", "always", "high_risk" };
            if (!in_list(json_string_value(v), p, 3))
                r = al_err(err, "settings", EINVAL, "approval_policy must be never, always or high_risk");
        } else if (strcmp(key, "allow_self_approval") == 0) {
            if (!json_is_boolean(v))
                r = al_err(err, "settings", EINVAL, "allow_self_approval must be true or false");
        } else if (strcmp(key, "approval_ttl_s") == 0) {
            r = num_in(v, 1, 7 * 86400, key, err);
        } else if (strcmp(key, "run_retention_s") == 0) {
            /* seconds, so a test (or a strict policy) can keep runs briefly;
             * at most ten years */
            r = json_is_integer(v) ? num_in(v, 1, AL_RUN_RETENTION_MAX_S, key, err)
                                   : al_err(err, "settings", EINVAL, "run_retention_s must be a whole number of seconds");
        } else if (strcmp(key, "sandbox_max_timeout_s") == 0) {
            r = json_is_integer(v) ? num_in(v, 1, AL_SANDBOX_TIMEOUT_CEILING_S, key, err)
                                   : al_err(err, "settings", EINVAL, "sandbox_max_timeout_s must be a whole number of "
                                                                     "seconds");
        } else if (strcmp(key, "e2b_session_box") == 0) {
            if (!json_is_boolean(v))
                r = al_err(err, "settings", EINVAL, "e2b_session_box must be true or false");
            else if (json_is_true(v) && strcmp(b->driver, "native") != 0)
                /* the session box is a native box held by a node: a
                 * container, or another service's sandbox, is not one */
                r = al_err(err, "settings", EINVAL, "e2b_session_box: the E2B session box (one box per sandbox "
                           "keeping interpreter state and background commands between calls) needs the native "
                           "driver; this service's driver is %s, where each command and runCode runs in a fresh "
                           "box and the files under /home/user are kept between them", b->driver);
        } else if (strcmp(key, "package_installs") == 0) {
            static const char *const m[] = { "off", "thread" };
            if (!in_list(json_string_value(v), m, ELEMENTSOF(m)))
                r = al_err(err, "settings", EINVAL, "package_installs must be off or thread");
        } else if (strcmp(key, "package_install_scripts") == 0) {
            static const char *const m[] = { "refuse", "box" };
            if (!in_list(json_string_value(v), m, ELEMENTSOF(m)))
                r = al_err(err, "settings", EINVAL, "package_install_scripts must be refuse or box");
            else if (strcmp(json_string_value(v), "box") == 0 && !b->package_scripts)
                /* the operator's refusal is a ceiling, not a default */
                r = al_err(err, "settings", EPERM, "package_install_scripts: this service refuses install scripts "
                           "(its package_install_scripts = refuse); a workspace cannot run them");
        } else if (strcmp(key, "price_per_run") == 0) {
            /* what a workspace pays is not its own admins' to decide */
            if (!json_equal(v, json_object_get(eff, "price_per_run")))
                r = al_err(err, "settings", EPERM, "price_per_run is set by the operator (airlock admin price set "
                           "--workspace WS AMOUNT), not by a workspace's admins");
            continue;
        } else if (strcmp(key, "tools") == 0) {
            size_t i;
            json_t *t;
            if (!json_is_array(v))
                r = al_err(err, "settings", EINVAL, "tools must be an array");
            json_array_foreach(v, i, t) if (r == 0 && !in_list(json_string_value(t), tool_names, ELEMENTSOF(tool_names)))
                r = al_err(err, "settings", EINVAL, "unknown tool in tools (code_execution, run_skill_script)");
        } else if (strcmp(key, "dlp_patterns") == 0) {
            r = check_dlp_patterns(v, err);
        } else if (strcmp(key, "secrets") == 0) {
            r = apply_secrets(sec, v, err);
            continue;
        } else {
            r = al_err(err, "settings", EINVAL, "unknown setting \"%s\"", key);
        }
        if (r == 0)
            json_object_set(cur, key, v);
    }
    if (r == 0 && (json_object_get(body, "network") || json_object_get(body, "network_allowed") ||
                   json_object_get(body, "network_hosts"))) {
        r = check_default_network(eff, cur, err);
    }
    if (r == 0 && (json_object_get(body, "e2b_session_box") || json_object_get(body, "approval_policy")))
        r = check_session_approvals(eff, cur, err);
    json_decref(eff);
    return r;
}

/* ------------------------------------------------------------- typed */

static const char *const policy_names[_AL_APPROVAL_POLICY_MAX] = {
    [AL_APPROVAL_NEVER] = "never",
    [AL_APPROVAL_ALWAYS] = "always",
    [AL_APPROVAL_HIGH_RISK] = "high_risk",
};

const char *al_approval_policy_name(al_approval_policy p) {
    return p >= 0 && p < _AL_APPROVAL_POLICY_MAX ? policy_names[p] : NULL;
}

al_approval_policy al_approval_policy_from_name(const char *name) {
    return (al_approval_policy)al_name_index(policy_names, _AL_APPROVAL_POLICY_MAX, name);
}

const char *al_tool_name(al_tool t) {
    return t >= 0 && t < _AL_TOOL_MAX ? tool_names[t] : NULL;
}

al_tool al_tool_from_name(const char *name) {
    return (al_tool)al_name_index(tool_names, _AL_TOOL_MAX, name);
}

int al_settings_parse(json_t *eff, al_settings *ret, al_error *err) {
    *ret = (al_settings){ 0 };
    if (!al_settings_sane(eff))
        return al_err(err, "settings", EBADMSG, "the workspace's settings are not sane (a setting of the wrong type "
                      "or value)");
    json_t *retention = json_object_get(eff, "run_retention_s");
    *ret = (al_settings){
        .disabled = strcmp(json_string_value(json_object_get(eff, "driver")), "disabled") == 0,
        .network = json_string_value(json_object_get(eff, "network")),
        .timeout_s = json_number_value(json_object_get(eff, "timeout_s")),
        .max_timeout_s = json_number_value(json_object_get(eff, "max_timeout_s")),
        .memory_mb = json_number_value(json_object_get(eff, "memory_mb")),
        .cpus = json_number_value(json_object_get(eff, "cpus")),
        .concurrency = (int)json_number_value(json_object_get(eff, "concurrency")),
        .approval_policy = al_approval_policy_from_name(json_string_value(json_object_get(eff, "approval_policy"))),
        .allow_self_approval = json_is_true(json_object_get(eff, "allow_self_approval")),
        .approval_ttl_s = (int64_t)json_number_value(json_object_get(eff, "approval_ttl_s")),
        .run_retention_s = json_is_integer(retention) ? (int64_t)json_integer_value(retention) : 0,
        .sandbox_max_timeout_s = (int64_t)json_number_value(json_object_get(eff, "sandbox_max_timeout_s")),
        .price_per_run = (int64_t)json_number_value(json_object_get(eff, "price_per_run")),
        .package_installs = strcmp(json_string_value(json_object_get(eff, "package_installs")), "thread") == 0,
        .package_scripts = strcmp(json_string_value(json_object_get(eff, "package_install_scripts")), "box") == 0,
        .doc = json_incref(eff),
    };
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(eff, "tools"), i, v) {
        al_tool t = al_tool_from_name(json_string_value(v));
        if (t != _AL_TOOL_INVALID)
            ret->tools |= AL_TOOL_BIT(t);
    }
    return 0;
}

void al_settings_done(al_settings *st) {
    json_decref(st->doc);
    *st = (al_settings){ 0 };
}

bool al_settings_tool_allowed(const al_settings *st, const char *tool) {
    al_tool t = al_tool_from_name(tool);
    return t != _AL_TOOL_INVALID && (st->tools & AL_TOOL_BIT(t));
}
