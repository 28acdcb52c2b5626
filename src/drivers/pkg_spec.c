/*
 * Package specs (pkg_spec.h). Checked by hand, character class by
 * character class, rather than by regcomp: the grammar is small, and a
 * checker with no state and no allocation can be called anywhere.
 */
#include "pkg_spec.h"

#include <string.h>
#include <strings.h>

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

/* Whether S's first N bytes end, ignoring case, in one of SUFFIXES. */
static bool ends_in(const char *s, size_t n, const char *const *suffixes, size_t k) {
    for (size_t i = 0; i < k; i++) {
        size_t m = strlen(suffixes[i]);
        if (n >= m && strncasecmp(s + n - m, suffixes[i], m) == 0)
            return true;
    }
    return false;
}

/* pip reads a requirement whose text (or whose name before its extras)
 * ends in an archive's extension as a file of its working directory
 * (pip's _get_url_from_path: `foo.whl`, `x==1.tar.gz`, `foo.zip[e]`),
 * whether or not the file is there: a path, not a name. */
static const char *const PIP_ARCHIVES[] = { ".zip", ".whl", ".tar", ".tgz", ".tbz", ".txz", ".tlz", ".gz",
                                            ".bz2", ".xz", ".lz", ".lzma" };

/* npm-package-arg reads a name (unscoped) or a range ending in
 * /[.](?:tgz|tar.gz|tar)$/i as a tarball file, and a range starting with
 * `.` as a directory (`left-pad@.`, `x@..`): paths, not versions. Its
 * `tar.gz` has an unescaped dot: any byte stands between tar and gz. */
static bool npm_file_like(const char *s, size_t n) {
    static const char *const tars[] = { ".tgz", ".tar" };
    if (ends_in(s, n, tars, ELEMENTSOF(tars)))
        return true;
    return n >= 7 && s[n - 7] == '.' && strncasecmp(s + n - 6, "tar", 3) == 0 && strncasecmp(s + n - 2, "gz", 2) == 0;
}

/* Whether pip or npm would read SPEC as a file or directory */
static bool reads_as_file(al_pkg_lang lang, const char *s) {
    if (lang == AL_PKG_PYTHON) {
        size_t whole = strlen(s), name = strcspn(s, "[=<>~!");
        return ends_in(s, whole, PIP_ARCHIVES, ELEMENTSOF(PIP_ARCHIVES)) ||
               ends_in(s, name, PIP_ARCHIVES, ELEMENTSOF(PIP_ARCHIVES));
    }
    bool scoped = *s == '@';
    const char *at = strchr(s + scoped, '@');
    size_t name = at ? (size_t)(at - s) : strlen(s);
    return (!scoped && npm_file_like(s, name)) || (at && (at[1] == '.' || npm_file_like(at + 1, strlen(at + 1))));
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
    if (ok && reads_as_file(lang, spec))
        return al_err(err, "packages", EINVAL,
                      "%s package spec \"%.*s\" would be read by %s as a file or directory, not a package of the "
                      "registry: name the package and its version, without an archive's extension or a leading dot",
                      al_pkg_lang_name(lang), (int)(n > 100 ? 100 : n), spec, lang == AL_PKG_PYTHON ? "pip" : "npm");
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
