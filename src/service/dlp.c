#include "dlp.h"

#include <regex.h>
#include <string.h>

#define MAX_PATTERNS 64
/* a line longer than this is released in pieces (a secret straddling the
 * cut could then pass; 64 KiB lines of secrets are not the common case) */
#define MAX_PENDING (64 * 1024)

typedef struct pattern {
    char name[48];
    regex_t re;
    int group;                    /* the subexpression replaced (0: the whole match) */
    bool builtin;
} pattern;

struct al_dlp {
    pattern p[MAX_PATTERNS];
    int n;
};

/* regexec tries every start position, so a pattern that can start on any
 * character must bound its repetitions (else a long run of matching
 * characters costs O(n^2)); one that starts with a literal (ghp_, sk-)
 * only starts there and may run on. Large bounds are avoided: they blow
 * up the compiled automaton. */
static const struct { const char *name, *re; int group; } builtin[] = {
    { "aws_access_key", "(AKIA|ASIA)[0-9A-Z]{16}" , 0 },
    { "aws_secret_key", "([Ss]ecret_?[Aa]ccess_?[Kk]ey|SECRET_ACCESS_KEY|aws_secret_key)[\"']?[[:space:]]{0,8}[=:][[:space:]]{0,8}[\"']?[A-Za-z0-9/+=]{40}" , 0 },
    { "bearer_token", "[Bb]earer[[:space:]]+[A-Za-z0-9._~+/-]{8}[A-Za-z0-9._~+/-]*=*", 0 },
    { "github_token", "(gh[pousr]_[A-Za-z0-9]{20}[A-Za-z0-9]*|github_pat_[A-Za-z0-9_]{22}[A-Za-z0-9_]*)", 0 },
    { "slack_token", "xox[abposr]-[A-Za-z0-9-]{10}[A-Za-z0-9-]*", 0 },
    /* not inside a word: "risk-assessment-summary" is no key */
    { "api_key", "(^|[^A-Za-z0-9_-])(sk-[A-Za-z0-9_-]{20}[A-Za-z0-9_-]*)", 2 },
    { "google_api_key", "AIza[0-9A-Za-z_-]{35}", 0 },
    { "url_password", "[A-Za-z][A-Za-z0-9+.-]{0,15}://[^/[:space:]:@]{1,32}:[^/[:space:]@]{1,48}@", 0 },
};

/* A workspace's own patterns may repeat without bound: long lines are
 * scanned for them in pieces cut at whitespace where possible, which bounds
 * their cost per piece. The built-in ones see the whole line. */
#define SEGMENT 4096

static const char *const key_begin = "-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----";
static const char *const key_end = "-----END [A-Z0-9 ]*PRIVATE KEY-----";

static int add(al_dlp *d, const char *name, const char *re, int group, bool is_builtin, al_error *err) {
    if (d->n == MAX_PATTERNS)
        return al_err(err, "dlp", E2BIG, "more than %d patterns", MAX_PATTERNS);
    pattern *p = &d->p[d->n];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->group = group;
    p->builtin = is_builtin;
    int rc = regcomp(&p->re, re, REG_EXTENDED);
    if (rc != 0) {
        char msg[200];
        regerror(rc, &p->re, msg, sizeof msg);
        return al_err(err, "dlp", EINVAL, "pattern %s: %s", name, msg);
    }
    d->n++;
    return 0;
}

int al_dlp_check_pattern(const char *pattern_text, al_error *err) {
    regex_t re;
    int rc = regcomp(&re, pattern_text, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char msg[200];
        regerror(rc, &re, msg, sizeof msg);
        return al_err(err, "dlp", EINVAL, "%s", msg);
    }
    regfree(&re);
    return 0;
}

int al_dlp_new(json_t *extra, al_dlp **ret, al_error *err) {
    al_dlp *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    /* the key markers are two more patterns, used by the line state machine */
    int r = add(d, "private_key", key_begin, 0, true, err);
    if (r == 0)
        r = add(d, "private_key_end", key_end, 0, true, err);
    for (size_t i = 0; r == 0 && i < ELEMENTSOF(builtin); i++)
        r = add(d, builtin[i].name, builtin[i].re, builtin[i].group, true, err);
    size_t k;
    json_t *e;
    json_array_foreach(extra, k, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *re = json_string_value(json_object_get(e, "pattern"));
        if (r == 0 && name && re)
            r = add(d, name, re, 0, false, err);
    }
    if (r < 0) {
        al_dlp_free(d);
        return r;
    }
    *ret = d;
    return 0;
}

void al_dlp_free(al_dlp *d) {
    if (!d)
        return;
    for (int i = 0; i < d->n; i++)
        regfree(&d->p[i].re);
    free(d);
}

typedef struct buf {
    char *s;
    size_t len, cap;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *ns = realloc(b->s, cap);
        if (!ns)
            return;
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static bool matches(regex_t *re, const char *line) { return regexec(re, line, 0, NULL, 0) == 0; }

/* Apply patterns [from, to) of D to TEXT, appending the result to OUT. */
static void apply(al_dlp *d, int from, int to, const char *text, int *count, buf *out) {
    buf cur = { 0 };
    put(&cur, text, strlen(text));
    for (int i = from; i < to && cur.s; i++) {
        buf next = { 0 };
        const char *p = cur.s;
        regmatch_t m[4];
        int g = d->p[i].group;
        int eflags = 0;
        while (*p && regexec(&d->p[i].re, p, (size_t)g + 1, m, eflags) == 0) {
            if (m[g].rm_so < 0 || m[g].rm_eo == m[g].rm_so) {
                /* an empty (or absent) match: step over one byte */
                put(&next, p, 1);
                p++;
                eflags = REG_NOTBOL;
                continue;
            }
            put(&next, p, (size_t)m[g].rm_so);
            char marker[80];
            int ml = snprintf(marker, sizeof marker, "[REDACTED:%s]", d->p[i].name);
            put(&next, marker, (size_t)ml);
            (*count)++;
            p += m[g].rm_eo;
            eflags = REG_NOTBOL;
        }
        put(&next, p, strlen(p));
        free(cur.s);
        cur = next;
    }
    if (cur.s)
        put(out, cur.s, cur.len);
    free(cur.s);
}

/* One line (NUL-terminated, without its newline) into OUT. */
static void redact_line(al_dlp *d, char *line, bool *in_key, int *count, buf *out) {
    if (*in_key) {
        if (matches(&d->p[1].re, line))
            *in_key = false;
        return; /* the block was replaced by one marker at its start */
    }
    if (matches(&d->p[0].re, line)) {
        put(out, "[REDACTED:private_key]", 22);
        (*count)++;
        *in_key = !matches(&d->p[1].re, line);
        return;
    }
    int first_custom = 2;
    while (first_custom < d->n && d->p[first_custom].builtin)
        first_custom++;
    buf mid = { 0 };
    put(&mid, "", 0);
    apply(d, 2, first_custom, line, count, &mid);
    if (first_custom == d->n || !mid.s) {
        if (mid.s)
            put(out, mid.s, mid.len);
        free(mid.s);
        return;
    }
    size_t len = mid.len;
    for (size_t off = 0; off < len;) {
        size_t n = len - off;
        if (n > SEGMENT) {
            n = SEGMENT;
            for (size_t k = SEGMENT; k > SEGMENT - 512; k--)
                if (mid.s[off + k - 1] == ' ' || mid.s[off + k - 1] == '\t') {
                    n = k;
                    break;
                }
        }
        char *piece = strndup(mid.s + off, n);
        if (!piece)
            break;
        apply(d, first_custom, d->n, piece, count, out);
        free(piece);
        off += n;
    }
    free(mid.s);
}

/* Redact complete lines of TEXT[0..len) (the last may lack a newline). */
static void redact_lines(al_dlp *d, const char *text, size_t len, bool *in_key, int *count, buf *out) {
    size_t start = 0;
    while (start < len) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        char *line = strndup(text + start, end - start);
        if (!line)
            return;
        /* a NUL inside the line would hide the rest from regexec: treat
         * the pieces as separate lines (the NULs are kept) */
        size_t ll = end - start;
        for (size_t off = 0; off <= ll;) {
            size_t seg = strnlen(line + off, ll - off);
            char saved = line[off + seg];
            line[off + seg] = '\0';
            redact_line(d, line + off, in_key, count, out);
            line[off + seg] = saved;
            off += seg;
            if (off < ll) {
                put(out, "", 1); /* the NUL byte itself */
                off++;
            } else {
                break;
            }
        }
        free(line);
        if (nl && !*in_key)
            put(out, "\n", 1);
        start = end + (nl ? 1 : 0);
    }
}

char *al_dlp_redact(al_dlp *d, const char *text, size_t len, int *count, size_t *ret_len) {
    buf out = { 0 };
    bool in_key = false;
    put(&out, "", 0);
    redact_lines(d, text, len, &in_key, count, &out);
    *ret_len = out.s ? out.len : 0;
    return out.s ? out.s : strdup("");
}

char *al_dlp_stream_feed(al_dlp_stream *st, const char *chunk, size_t len, size_t *ret_len) {
    char *np = realloc(st->pending, st->len + len + 1);
    if (!np)
        return NULL;
    st->pending = np;
    memcpy(st->pending + st->len, chunk, len);
    st->len += len;
    st->pending[st->len] = '\0';
    /* release up to the last newline; hold the partial line */
    char *last = NULL;
    for (size_t i = st->len; i > 0; i--)
        if (st->pending[i - 1] == '\n') {
            last = st->pending + i - 1;
            break;
        }
    size_t upto = last ? (size_t)(last - st->pending) + 1 : 0;
    if (!last && st->len > MAX_PENDING) {
        /* a line too long to hold whole: release up to its last blank, so a
         * token being written is kept back with what follows it; without
         * one, keep the last KiB (longer than any built-in secret) */
        upto = st->len - 1024;
        for (size_t i = st->len; i > st->len - 4096; i--)
            if (st->pending[i - 1] == ' ' || st->pending[i - 1] == '\t') {
                upto = i;
                break;
            }
    }
    if (upto == 0)
        return NULL;
    buf out = { 0 };
    put(&out, "", 0);
    redact_lines(st->dlp, st->pending, upto, &st->in_key, &st->count, &out);
    memmove(st->pending, st->pending + upto, st->len - upto);
    st->len -= upto;
    st->pending[st->len] = '\0';
    if (out.s && out.len == 0) {
        free(out.s);
        return NULL;
    }
    *ret_len = out.len;
    return out.s;
}

char *al_dlp_stream_flush(al_dlp_stream *st, size_t *ret_len) {
    char *r = NULL;
    *ret_len = 0;
    if (st->len) {
        buf out = { 0 };
        put(&out, "", 0);
        redact_lines(st->dlp, st->pending, st->len, &st->in_key, &st->count, &out);
        r = out.s;
        *ret_len = out.s ? out.len : 0;
    }
    free(st->pending);
    st->pending = NULL;
    st->len = 0;
    return r;
}
