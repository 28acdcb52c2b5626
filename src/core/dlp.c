#include "dlp.h"

#include <nettle/base64.h>
#include <string.h>
#include <time.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define MAX_PATTERNS 64
/* a line longer than this is released in pieces (a secret straddling the
 * cut could then pass; 64 KiB lines of secrets are not the common case) */
#define MAX_PENDING (64 * 1024)

/* The cost of a pattern is bounded, because a workspace's own patterns are
 * tenant input run on the host for every line of every run: the text of a
 * pattern (a settings check refuses a longer one), its compiled size (a
 * bounded repeat of a group is compiled as copies), its nesting, the memory
 * compiling may take, and per match the backtracking steps, the depth and
 * the heap. A match that reaches a limit cannot tell whether the line holds
 * a secret, so the rest of the line is withheld (fails closed). */
#define PATTERN_TEXT_MAX 512
#define COMPILED_MAX (64 * 1024)
#define COMPILE_MEMORY_MAX (4u << 20)
#define PARENS_NEST_MAX 32
#define MATCH_LIMIT 200000
#define DEPTH_LIMIT 2000
#define HEAP_LIMIT_KIB 4096
/* and across a whole run, the CPU time its workspace's patterns may take:
 * past it, each line they would have seen is withheld instead */
#define CUSTOM_CPU_NS (2ull * 1000 * 1000 * 1000)

/* Compiling takes memory from a budget (PCRE2's general context): each
 * compile may take COMPILE_MEMORY_MAX more than what is held already. The
 * compiled code frees through it too, so the budget outlives its codes. */
typedef struct budget {
    size_t used, limit;
} budget;

typedef struct pattern {
    char name[48];
    pcre2_code *re;
    int group;                    /* the subexpression replaced (0: the whole match) */
    bool builtin;
} pattern;

struct al_dlp {
    pattern p[MAX_PATTERNS];
    int n;
    budget mem;                   /* what compiling took and the codes hold */
    pcre2_match_context *mctx;
    pcre2_match_data *md;         /* one run's redactor is used by one thread at a time */
    uint64_t custom_ns;           /* CPU time spent in custom patterns so far */
};

/* Patterns are PCRE2, matched on bytes (never as UTF-8: output is bytes
 * and may hold anything, NULs included). A pattern that can start on any
 * character bounds its repetitions; one that starts with a literal (ghp_,
 * sk-) only starts there and may run on. */
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

/* A workspace's own patterns see long lines in pieces cut at whitespace
 * where possible, which bounds their cost per piece further. The built-in
 * ones see the whole line. */
#define SEGMENT 4096

static const char *const key_begin = "-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----";
static const char *const key_end = "-----END [A-Z0-9 ]*PRIVATE KEY-----";

static void *budget_malloc(size_t n, void *data) {
    budget *b = data;
    if (n > b->limit || b->used + n > b->limit)
        return NULL;
    char *p = malloc(n + sizeof(max_align_t));
    if (!p)
        return NULL;
    memcpy(p, &n, sizeof n);
    b->used += n;
    return p + sizeof(max_align_t);
}

static void budget_free(void *ptr, void *data) {
    budget *b = data;
    if (!ptr)
        return;
    char *p = (char *)ptr - sizeof(max_align_t);
    size_t n;
    memcpy(&n, p, sizeof n);
    b->used -= n;
    free(p);
}

/* Compile RE within the bounds above; NULL and a message in ERR when not. */
static pcre2_code *compile(budget *b, const char *name, const char *re, al_error *err) {
    size_t len = strlen(re);
    if (len == 0 || len > PATTERN_TEXT_MAX) {
        al_err(err, "dlp", EINVAL, "pattern %s: want 1 to %d bytes", name, PATTERN_TEXT_MAX);
        return NULL;
    }
    b->limit = b->used + COMPILE_MEMORY_MAX;
    pcre2_general_context *gc = pcre2_general_context_create(budget_malloc, budget_free, b);
    pcre2_compile_context *cc = gc ? pcre2_compile_context_create(gc) : NULL;
    if (!cc) {
        pcre2_general_context_free(gc);
        al_err(err, "dlp", ENOMEM, "pattern %s: out of memory", name);
        return NULL;
    }
    pcre2_set_max_pattern_length(cc, PATTERN_TEXT_MAX);
    pcre2_set_parens_nest_limit(cc, PARENS_NEST_MAX);
    int ec = 0;
    PCRE2_SIZE eo = 0;
    /* bytes, never UTF (nor may the pattern turn it on: (*UTF) would make
     * output that is not UTF-8 an error), and no \C */
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, len, PCRE2_NEVER_UTF | PCRE2_NEVER_UCP | PCRE2_NEVER_BACKSLASH_C,
                                     &ec, &eo, cc);
    pcre2_compile_context_free(cc);
    pcre2_general_context_free(gc);
    if (!code) {
        PCRE2_UCHAR msg[200];
        if (pcre2_get_error_message(ec, msg, sizeof msg) < 0)
            snprintf((char *)msg, sizeof msg, "error %d", ec);
        al_err(err, "dlp", EINVAL, "pattern %s: %s at offset %zu%s", name, (const char *)msg, (size_t)eo,
               ec == PCRE2_ERROR_NOMEMORY ? " (compiling it would take too much memory)" : "");
        return NULL;
    }
    size_t size = 0;
    pcre2_pattern_info(code, PCRE2_INFO_SIZE, &size);
    if (size > COMPILED_MAX) {
        pcre2_code_free(code);
        al_err(err, "dlp", E2BIG, "pattern %s: compiles to %zu bytes, more than %d (bound its repeats)", name, size,
               COMPILED_MAX);
        return NULL;
    }
    /* JIT where the platform has it; the interpreter (same limits) else */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    return code;
}

static int add(al_dlp *d, const char *name, const char *re, int group, bool is_builtin, al_error *err) {
    if (d->n == MAX_PATTERNS)
        return al_err(err, "dlp", E2BIG, "more than %d patterns", MAX_PATTERNS);
    pattern *p = &d->p[d->n];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->group = group;
    p->builtin = is_builtin;
    p->re = compile(&d->mem, name, re, err);
    if (!p->re)
        return -EINVAL;
    d->n++;
    return 0;
}

int al_dlp_check_pattern(const char *pattern_text, al_error *err) {
    budget b = { 0 };
    pcre2_code *c = compile(&b, "", pattern_text, err);
    if (!c) {
        /* "pattern : msg" reads badly: the caller names the pattern */
        const char *m = strncmp(err->msg, "pattern : ", 10) == 0 ? err->msg + 10 : NULL;
        if (m)
            memmove(err->msg, m, strlen(m) + 1);
        return -EINVAL;
    }
    pcre2_code_free(c);
    return 0;
}

int al_dlp_new(json_t *extra, al_dlp **ret, al_error *err) {
    al_dlp *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->mctx = pcre2_match_context_create(NULL);
    d->md = pcre2_match_data_create(4, NULL);
    int r = d->mctx && d->md ? 0 : -ENOMEM;
    if (r == 0) {
        pcre2_set_match_limit(d->mctx, MATCH_LIMIT);
        pcre2_set_depth_limit(d->mctx, DEPTH_LIMIT);
        pcre2_set_heap_limit(d->mctx, HEAP_LIMIT_KIB);
        /* the key markers are two more patterns, used by the line state machine */
        r = add(d, "private_key", key_begin, 0, true, err);
    }
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
        pcre2_code_free(d->p[i].re);
    pcre2_match_data_free(d->md);
    pcre2_match_context_free(d->mctx);
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

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* 1 match (its offsets in *SO, *EO), 0 none, -1 the match reached a limit. */
static int match(al_dlp *d, int i, const char *text, size_t len, size_t from, size_t *so, size_t *eo) {
    int rc = pcre2_match(d->p[i].re, (PCRE2_SPTR)text, len, from, 0, d->md, d->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0 && rc != 0)
        return -1;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(d->md);
    int g = d->p[i].group;
    if (ov[2 * g] == PCRE2_UNSET) {
        *so = *eo = ov[1]; /* the group did not take part: step past the match */
        return 1;
    }
    *so = ov[2 * g];
    *eo = ov[2 * g + 1];
    return 1;
}

static bool matches(al_dlp *d, int i, const char *line, size_t len) {
    size_t so, eo;
    return match(d, i, line, len, 0, &so, &eo) != 0; /* a limit: treated as a marker line */
}

static void marker(al_dlp *d, int i, buf *out) {
    char m[80];
    int ml = snprintf(m, sizeof m, "[REDACTED:%s]", d->p[i].name);
    put(out, m, (size_t)ml);
}

/* Apply patterns [from, to) of D to TEXT[0..len), appending the result to OUT. */
static void apply(al_dlp *d, int from, int to, const char *text, size_t len, int *count, buf *out) {
    buf cur = { 0 };
    put(&cur, text, len);
    for (int i = from; i < to && cur.s; i++) {
        buf next = { 0 };
        put(&next, "", 0);
        size_t p = 0;
        while (p < cur.len) {
            size_t so = 0, eo = 0;
            int m = match(d, i, cur.s, cur.len, p, &so, &eo);
            if (m == 0)
                break;
            if (m < 0) {
                /* too costly to decide: the rest is withheld */
                marker(d, i, &next);
                (*count)++;
                p = cur.len;
                break;
            }
            if (eo == so) {
                /* an empty (or absent) match: keep up to it, step one byte */
                size_t upto = so < cur.len ? so + 1 : cur.len;
                if (upto <= p)
                    upto = p + 1;
                put(&next, cur.s + p, upto - p);
                p = upto;
                continue;
            }
            put(&next, cur.s + p, so - p);
            marker(d, i, &next);
            (*count)++;
            p = eo;
        }
        if (p < cur.len)
            put(&next, cur.s + p, cur.len - p);
        free(cur.s);
        cur = next;
    }
    if (cur.s)
        put(out, cur.s, cur.len);
    free(cur.s);
}

/* The workspace's own patterns on TEXT, within the run's CPU budget for
 * them; past it, the text is withheld whole. */
static void apply_custom(al_dlp *d, int first_custom, const char *text, size_t len, int *count, buf *out) {
    if (d->custom_ns >= CUSTOM_CPU_NS) {
        put(out, "[REDACTED:dlp_budget]", 21);
        (*count)++;
        return;
    }
    uint64_t t0 = thread_cpu_ns();
    apply(d, first_custom, d->n, text, len, count, out);
    d->custom_ns += thread_cpu_ns() - t0;
}

/* One line (bytes, without its newline; NULs are bytes like others) into OUT. */
static void redact_line(al_dlp *d, const char *line, size_t ll, bool *in_key, int *count, buf *out) {
    if (*in_key) {
        if (matches(d, 1, line, ll))
            *in_key = false;
        return; /* the block was replaced by one marker at its start */
    }
    if (matches(d, 0, line, ll)) {
        put(out, "[REDACTED:private_key]", 22);
        (*count)++;
        *in_key = !matches(d, 1, line, ll);
        return;
    }
    int first_custom = 2;
    while (first_custom < d->n && d->p[first_custom].builtin)
        first_custom++;
    buf mid = { 0 };
    put(&mid, "", 0);
    apply(d, 2, first_custom, line, ll, count, &mid);
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
        apply_custom(d, first_custom, mid.s + off, n, count, out);
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
        redact_line(d, text + start, end - start, in_key, count, out);
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
        /* and not inside a UTF-8 sequence, so each piece shows whole */
        for (size_t k = 0; k < 3 && upto > 1 && ((unsigned char)st->pending[upto] & 0xc0) == 0x80; k++)
            upto--;
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

/* ---------------------------------------------------------------- output */

int al_output_set(json_t *obj, const char *key, const char *bytes, size_t len) {
    const unsigned char *u = (const unsigned char *)bytes;
    if (len > SIZE_MAX / 3 - 1)
        return -E2BIG;
    char *text = malloc(len * 3 + 1);
    if (!text)
        return -ENOMEM;
    text[0] = '\0';
    size_t o = 0;
    bool exact = true;
    for (size_t i = 0; i < len;) {
        size_t k = u[i] ? al_utf8_seq(u + i, len - i) : 0; /* NUL is not text here */
        if (k == 0) {
            memcpy(text + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
            exact = false;
        } else {
            memcpy(text + o, bytes + i, k);
            o += k;
            i += k;
        }
    }
    json_t *t = json_stringn_nocheck(text, o);
    free(text);
    char b64key[80];
    snprintf(b64key, sizeof b64key, "%s_base64", key);
    if (!t)
        return -ENOMEM;
    json_object_set_new(obj, key, t);
    if (exact) {
        json_object_del(obj, b64key);
        return 0;
    }
    char *b64 = malloc(BASE64_ENCODE_RAW_LENGTH(len) + 1);
    if (!b64)
        return -ENOMEM;
    base64_encode_raw(b64, len, u);
    b64[BASE64_ENCODE_RAW_LENGTH(len)] = '\0';
    json_object_set_new(obj, b64key, json_stringn_nocheck(b64, BASE64_ENCODE_RAW_LENGTH(len)));
    free(b64);
    return 0;
}

char *al_output_get(json_t *obj, const char *key, size_t *ret_len) {
    char b64key[80];
    snprintf(b64key, sizeof b64key, "%s_base64", key);
    json_t *b = json_object_get(obj, b64key), *t = json_object_get(obj, key);
    *ret_len = 0;
    if (json_is_string(b)) {
        size_t n = json_string_length(b);
        char *out = malloc(BASE64_DECODE_LENGTH(n) + 1);
        if (!out)
            return NULL;
        struct base64_decode_ctx ctx;
        base64_decode_init(&ctx);
        size_t len = BASE64_DECODE_LENGTH(n);
        if (base64_decode_update(&ctx, &len, (uint8_t *)out, n, json_string_value(b)) && base64_decode_final(&ctx)) {
            out[len] = '\0';
            *ret_len = len;
            return out;
        }
        free(out);
    }
    if (!json_is_string(t))
        return NULL;
    size_t n = json_string_length(t);
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    memcpy(out, json_string_value(t), n);
    out[n] = '\0';
    *ret_len = n;
    return out;
}
