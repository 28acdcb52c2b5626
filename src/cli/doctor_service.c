/* `airlock doctor --url URL`: what a running service enforces and keeps,
 * as its GET /v1/settings says: the driver's badges, control by control;
 * and, for its operator (GET /operator/status: from a loopback address or
 * with the operator token), its warm pool (per shape: size by demand,
 * idle, starting, hits, misses, memory), which is every tenant's and so
 * no tenant's to read. airlock-server only: it links libcurl. */
#include <curl/curl.h>
#include <string.h>

#include "cli.h"

/* a settings document is a few KiB; anything far bigger is not one */
#define BODY_MAX (1 << 20)

/* S for a terminal: what a service says is printed with its control
 * characters (escapes, newlines) as "?", at most 400 bytes. From a ring of
 * buffers, so that one printf may hold several. */
static const char *clean(const char *s) {
    static char ring[8][401];
    static unsigned next;
    char *out = ring[next++ % 8];
    size_t n = 0;
    for (; s && s[n] && n < sizeof ring[0] - 1; n++)
        out[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n];
    out[n] = '\0';
    return out;
}

/* O's string K, for a terminal */
static const char *str(json_t *o, const char *k) { return clean(json_string_value(json_object_get(o, k))); }

/* GET URL PATH (with KEY, when not NULL): the document, or NULL after
 * saying why (QUIET: saying nothing of a refusal, *RET_STATUS says it). */
static json_t *get_doc(const char *url, const char *path, const char *key, bool quiet, long *ret_status) {
    char target[2048], auth[600] = "";
    size_t ul = strlen(url);
    while (ul > 0 && url[ul - 1] == '/')
        ul--;
    if (ul + strlen(path) + 1 > sizeof target || (key && strlen(key) + 32 > sizeof auth)) {
        fprintf(stderr, "airlock doctor: the URL or the key is too long\n");
        return NULL;
    }
    /* the key goes into a header line as it is: one with a line break in
     * it would add headers of its own */
    for (const char *c = key; c && *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            fprintf(stderr, "airlock doctor: the key holds a control character\n");
            return NULL;
        }
    snprintf(target, sizeof target, "%.*s%s", (int)ul, url, path);
    if (key)
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
    CURL *h = curl_easy_init();
    if (!h) {
        fprintf(stderr, "airlock doctor: libcurl did not start\n");
        return NULL;
    }
    al_buf b = { .max = BODY_MAX };
    struct curl_slist *hdrs = auth[0] ? curl_slist_append(NULL, auth) : NULL;
    curl_easy_setopt(h, CURLOPT_URL, target);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, al_buf_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    *ret_status = status;
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    json_t *doc = rc == CURLE_OK && b.buf ? json_loadb(b.buf, b.len, 0, NULL) : NULL;
    free(b.buf);
    if (rc != CURLE_OK) {
        fprintf(stderr, "airlock doctor: %s: %s\n", target,
                b.over ? "an answer of more than 1 MiB, not a settings document" : curl_easy_strerror(rc));
        json_decref(doc);
        return NULL;
    }
    if (status != 200 || !json_is_object(doc)) {
        if (quiet) {
            json_decref(doc);
            return NULL;
        }
        const char *msg = str(json_object_get(doc, "error"), "message");
        fprintf(stderr, "airlock doctor: %s: HTTP %ld%s%s\n", target, status, msg[0] ? ": " : "", msg);
        json_decref(doc);
        return NULL;
    }
    return doc;
}

static double mib(json_t *o, const char *k) {
    return (double)json_integer_value(json_object_get(o, k)) / (1 << 20);
}

static long long num(json_t *o, const char *k) { return (long long)json_integer_value(json_object_get(o, k)); }

static void print_pool(json_t *st) {
    printf("\npool:    at most %lld per shape; %lld idle, %lld starting; %.1f MiB of %.0f MiB; %lld hits, %lld misses\n",
           num(st, "per_shape"), num(st, "idle"), num(st, "starting"), mib(st, "memory_bytes"),
           mib(st, "memory_budget_bytes"), num(st, "hits"), num(st, "misses"));
    if (str(st, "preload")[0])
        printf("         preloads %s, for code that names them\n", str(st, "preload"));
    size_t i;
    json_t *sh;
    json_array_foreach(json_object_get(st, "shapes"), i, sh) {
        printf("shape:   %s on %s, %.0f MiB, %lld ms CPU/s, %lld pids, %lld s%s\n", str(sh, "language"),
               str(sh, "image"), mib(sh, "memory_bytes"), num(sh, "cpu_millis"), num(sh, "pids"), num(sh, "timeout_s"),
               str(sh, "preload")[0] ? ", preloaded" : "");
        printf("         want %lld, idle %lld, starting %lld, hits %lld, misses %lld, a box holds %.1f MiB\n",
               num(sh, "want"), num(sh, "idle"), num(sh, "starting"), num(sh, "hits"), num(sh, "misses"),
               mib(sh, "box_bytes"));
        if (str(sh, "held_back")[0])
            printf("         held back by %s\n", str(sh, "held_back"));
        if (str(sh, "last_error")[0])
            printf("         last error: %s\n", str(sh, "last_error"));
    }
}

/* The operator token in FILE (its first line), into TOKEN; false after
 * saying why. */
static bool read_token(const char *file, char *token, size_t cap) {
    _cleanup_fclose_ FILE *f = fopen(file, "re");
    if (!f || !fgets(token, (int)cap, f)) {
        fprintf(stderr, "airlock doctor: cannot read the operator token from %s\n", clean(file));
        return false;
    }
    token[strcspn(token, "\r\n")] = '\0';
    return true;
}

int cli_doctor_service(const char *url, const char *key, const char *op_token_file, bool json) {
    if (!key || !key[0]) {
        fprintf(stderr, "airlock doctor: --url needs an API key: --key KEY or AIRLOCK_API_KEY\n");
        return 125;
    }
    char token[256];
    if (op_token_file && !read_token(op_token_file, token, sizeof token))
        return 125;
    long status = 0;
    json_t *doc = get_doc(url, "/v1/settings", key, false, &status);
    if (!doc)
        return 1;
    /* the pool's live state (every tenant's shapes and counts) is the
     * operator's: asked for as one, and said when this is not one */
    json_t *op = get_doc(url, "/operator/status", op_token_file ? token : NULL, true, &status);
    json_t *badges = json_object_get(doc, "badges");
    json_t *pool = json_object_get(json_object_get(json_object_get(op, "badges"), "pool"), "state");
    if (!op && status != 403 && status != 401) {
        json_decref(doc);
        fprintf(stderr, "airlock doctor: %s/operator/status: HTTP %ld\n", clean(url), status);
        return 1;
    }
    if (json) {
        json_t *out = json_pack("{s:s%, s:O?, s:O?, s:O?}", "service", url, strlen(url), "driver",
                                json_object_get(doc, "driver"), "controls", badges, "pool", pool);
        char *s = out ? json_dumps(out, JSON_INDENT(2)) : NULL;
        if (s)
            printf("%s\n", s);
        else
            fprintf(stderr, "airlock doctor: the answer could not be printed as JSON\n");
        free(s);
        json_decref(out);
        json_decref(doc);
        json_decref(op);
        return s ? 0 : 1;
    }
    printf("service: %s, driver %s\n%-20s %-22s %s\n", clean(url), str(doc, "driver"), "CONTROL", "LEVEL", "DETAIL");
    const char *k;
    json_t *v;
    json_object_foreach(badges, k, v) {
        if (json_is_object(v))
            printf("%-20s %-22s %s\n", clean(k), str(v, "level"), str(v, "detail"));
    }
    if (json_is_object(pool))
        print_pool(pool);
    else if (!op)
        printf("\npool:    its live state is the operator's (HTTP %ld): ask from the service's host, or with "
               "--operator-token-file\n", status);
    json_decref(doc);
    json_decref(op);
    return 0;
}
