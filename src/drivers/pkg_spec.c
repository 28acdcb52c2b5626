/*
 * Package specs (pkg_spec.h). Checked by hand, character class by
 * character class, rather than by regcomp: the grammar is small, and a
 * checker with no state and no allocation can be called anywhere.
 */
#include "pkg_spec.h"

#include <string.h>

#include "job.h"

static const char *const lang_names[_AL_PKG_LANG_MAX] = { "python", "node" };

const char *al_pkg_lang_name(al_pkg_lang l) {
    return l >= 0 && l < _AL_PKG_LANG_MAX ? lang_names[l] : "?";
}

int al_pkg_lang_from_name(const char *name, al_pkg_lang *ret) {
    for (int i = 0; name && i < _AL_PKG_LANG_MAX; i++)
        if (strcmp(name, lang_names[i]) == 0) {
            *ret = (al_pkg_lang)i;
            return 0;
        }
    return -EINVAL;
}

static bool alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
static bool lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

/* the length of the run of S's characters that are alnum or in EXTRA */
static size_t run_of(const char *s, bool (*first)(char), const char *extra) {
    size_t n = 0;
    while (s[n] && (first(s[n]) || (extra && strchr(extra, s[n]))))
        n++;
    return n;
}

static bool python_ok(const char *s) {
    if (!alnum(s[0]))
        return false;
    s += run_of(s, alnum, "._-");
    if (*s == '[') {
        size_t n = run_of(s + 1, alnum, ",._-");
        if (!n || s[1 + n] != ']')
            return false;
        s += n + 2;
    }
    if (!*s)
        return true;
    static const char *const ops[] = { "==", ">=", "<=", "~=", "!=", "<", ">" };
    size_t op = 0;
    for (size_t i = 0; i < ELEMENTSOF(ops) && !op; i++)
        if (strncmp(s, ops[i], strlen(ops[i])) == 0)
            op = strlen(ops[i]);
    if (!op)
        return false;
    s += op;
    size_t n = run_of(s, alnum, ".*+!_-");
    return n && !s[n];
}

static bool node_ok(const char *s) {
    if (*s == '@') {
        if (!lower_alnum(s[1]))
            return false;
        size_t n = run_of(s + 1, lower_alnum, "._-");
        if (s[1 + n] != '/')
            return false;
        s += n + 2;
    }
    if (!lower_alnum(s[0]))
        return false;
    s += run_of(s, lower_alnum, "._-");
    if (!*s)
        return true;
    if (*s != '@')
        return false;
    size_t n = run_of(s + 1, alnum, ".^~<>=*|+_ -");
    return n && !s[1 + n];
}

int al_pkg_spec_check(al_pkg_lang lang, const char *spec, al_error *err) {
    size_t n = spec ? strlen(spec) : 0;
    if (!n || n > AL_JOB_PKG_SPEC_MAX)
        return al_err(err, "packages", EINVAL, "a %s package spec is 1 to %d bytes", al_pkg_lang_name(lang),
                      AL_JOB_PKG_SPEC_MAX);
    if (spec[0] == '-')
        return al_err(err, "packages", EINVAL, "%s package spec \"%.64s\": a spec is a name, not an option",
                      al_pkg_lang_name(lang), spec);
    bool ok = lang == AL_PKG_PYTHON ? python_ok(spec) : lang == AL_PKG_NODE ? node_ok(spec) : false;
    if (!ok)
        return al_err(err, "packages", EINVAL,
                      "%s package spec \"%.*s\" is not a name with an optional version (%s): no URL, path, git "
                      "ref or option",
                      al_pkg_lang_name(lang), (int)(n > 100 ? 100 : n), spec,
                      lang == AL_PKG_PYTHON ? "name, name[extra], name==1.2, name>=1.0" : "name, @scope/name, name@1.2, name@^1");
    return 0;
}

void al_pkg_spec_name(al_pkg_lang lang, const char *spec, char *buf, size_t len) {
    size_t n;
    if (lang == AL_PKG_PYTHON)
        n = strcspn(spec, "[=<>~!");
    else {
        const char *at = strchr(spec + (spec[0] == '@'), '@');
        n = at ? (size_t)(at - spec) : strlen(spec);
    }
    snprintf(buf, len, "%.*s", (int)n, spec);
}
