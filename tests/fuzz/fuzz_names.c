/*
 * Fuzz target for the names of the files a script leaves in /out
 * (src/box/collect.c, al_utf8_decode in src/util/util.c): a name is either
 * collected exactly as it is stored, or skipped and shown escaped.
 *
 * What must hold, for any byte string without NUL:
 * - al_collect_name_problem calls a name invalid UTF-8 exactly when
 *   jansson (an independent decoder, and the JSON the name travels in)
 *   refuses it;
 * - a collected name has no control or bidirectional character, and its
 *   escaped form is itself with each backslash doubled;
 * - the escaped form is valid UTF-8 with nothing left to escape, and
 *   un-escaping it gives back the exact bytes: two different names are
 *   never shown the same.
 */
#include <jansson.h>

#include "box/collect.h"
#include "fuzz.h"
#include "util/util.h"

static long n_ok, n_invalid, n_control;

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The inverse of al_collect_name_escape: "\\" and "\xNN". */
static char *unescape(const char *e, size_t *ret_len) {
    size_t n = strlen(e), o = 0;
    char *out = malloc(n + 1);
    if (!out)
        abort();
    for (size_t i = 0; i < n;) {
        if (e[i] != '\\') {
            out[o++] = e[i++];
            continue;
        }
        FUZZ_CHECK(i + 1 < n, "a lone backslash ends %s", e);
        if (e[i + 1] == '\\') {
            out[o++] = '\\';
            i += 2;
            continue;
        }
        FUZZ_CHECK(e[i + 1] == 'x' && i + 3 < n + 1 && hexval(e[i + 2]) >= 0 && hexval(e[i + 3]) >= 0,
                   "a backslash that is no escape in %s", e);
        out[o++] = (char)(hexval(e[i + 2]) << 4 | hexval(e[i + 3]));
        i += 4;
    }
    out[o] = '\0';
    *ret_len = o;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096)
        return 0;
    char *name = fuzz_copy(data, size, 1);
    size_t n = strlen(name);
    const char *why = al_collect_name_problem(name);
    json_t *j = json_stringn(name, n);
    bool invalid = why && strstr(why, "not valid UTF-8");
    FUZZ_CHECK(invalid == (j == NULL), "UTF-8 verdicts differ: ours %s, jansson's %s", invalid ? "invalid" : "valid",
               j ? "valid" : "invalid");
    json_decref(j);
    char *esc = al_collect_name_escape(name);
    FUZZ_CHECK(esc, "escape failed");
    if (!why) {
        n_ok++;
        size_t bs = 0;
        for (size_t i = 0; i < n; i++)
            bs += name[i] == '\\';
        FUZZ_CHECK(strlen(esc) == n + bs, "a collected name is shown otherwise than it is");
    } else {
        n_invalid += invalid;
        n_control += !invalid;
    }
    FUZZ_CHECK(al_collect_name_problem(esc) == NULL, "the escaped form %s still has something to escape", esc);
    size_t ul = 0;
    char *back = unescape(esc, &ul);
    FUZZ_CHECK(ul == n && memcmp(back, name, n) == 0, "un-escaping %s does not give the name back", esc);
    free(back);
    free(esc);
    free(name);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-names: %ld collected, %ld not UTF-8, %ld with a control\n", n_ok, n_invalid, n_control);
    return n_ok && n_invalid && n_control ? 0 : 1;
}
