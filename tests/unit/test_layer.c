/* Unit tests for the package layer store (src/image/layer.c): the key is
 * the set's (order of the specs aside) and changes with every part of it;
 * the reports a layer's list is made from are read as hostile (types,
 * forms, sizes); a layer is complete only with its layer.json, and the
 * commit is a rename of a complete directory. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/layer.h"
#include "util/util.h"

#include "check.h"

static int put(int dirfd, const char *path, const char *text) {
    return al_write_str(dirfd, path, text);
}

static bool python_ok(int dirfd, const char *text, size_t *ret_n) {
    put(dirfd, "python-report.json", text);
    json_t *out = NULL;
    al_error err = { 0 };
    int r = al_layer_python_report(dirfd, &out, &err);
    if (ret_n)
        *ret_n = r == 0 ? json_array_size(out) : 0;
    json_decref(out);
    return r == 0;
}

static bool node_ok(int dirfd, const char *text) {
    put(dirfd, "node/package-lock.json", text);
    json_t *out = NULL;
    al_error err = { 0 };
    int r = al_layer_node_report(dirfd, &out, &err);
    json_decref(out);
    return r == 0;
}

int main(void) {
    /* the key */
    char *py1[] = { "b==1", "a==2" }, *py2[] = { "a==2", "b==1" }, *node[] = { "left-pad@1.3.0" };
    al_layer_want w = { "aa", "bb", py1, 2, node, 1, "https://pypi.org/simple", "https://registry.npmjs.org/", true };
    char k1[65], k2[65];
    al_layer_key(&w, k1);
    w.python = py2;
    al_layer_key(&w, k2);
    CHECK(strlen(k1) == 64 && strcmp(k1, k2) == 0);
    al_layer_want v[] = { w, w, w, w, w, w };
    v[0].image = "ab";
    v[1].installer = "bc";
    v[2].n_python = 1;
    v[3].scripts = false;
    v[4].index_python = "https://pypi.internal/simple";
    v[5].n_node = 0;
    for (size_t i = 0; i < ELEMENTSOF(v); i++) {
        al_layer_key(&v[i], k2);
        CHECK(strcmp(k1, k2) != 0);
    }
    /* the registry of a language with no specs is not part of the set */
    al_layer_want a = { "aa", "bb", py1, 2, NULL, 0, "https://pypi.org/simple", "https://x.example/", true };
    al_layer_want b = a;
    b.registry_node = "https://y.example/";
    al_layer_key(&a, k1);
    al_layer_key(&b, k2);
    CHECK(strcmp(k1, k2) == 0);

    /* "node" is a spec of both languages: a list ends by its count, not
     * by the word after it (with -1 keys these two sets shared one) */
    char *pa[] = { "a" }, *na[] = { "node", "x" }, *pb[] = { "a", "node" }, *nb[] = { "x" };
    al_layer_want ca = { "aa", "bb", pa, 1, na, 2, "https://pypi.org/simple", "https://registry.npmjs.org/", true };
    al_layer_want cb = { "aa", "bb", pb, 2, nb, 1, "https://pypi.org/simple", "https://registry.npmjs.org/", true };
    al_layer_key(&ca, k1);
    al_layer_key(&cb, k2);
    CHECK(strcmp(k1, k2) != 0);

    char tmpl[] = "/tmp/airlock-layer-test-XXXXXX";
    CHECK(mkdtemp(tmpl) != NULL);
    int lfd = -1;
    al_error err = { 0 };
    CHECK(al_layer_dir_open(tmpl, &lfd, &err) == 0);
    char tmp[16];
    int tfd = -1;
    CHECK(al_layer_tmp(lfd, tmp, &tfd, &err) == 0 && strncmp(tmp, "tmp-", 4) == 0);
    mkdirat(tfd, "node", 0755);
    {
        /* a live install's tmp- (its fd open: its lock held) outlives a
         * sweep; a dead one's (no lock held) goes at the next, however young */
        char dead[16];
        int dfd = -1, l2 = -1;
        CHECK(al_layer_tmp(lfd, dead, &dfd, &err) == 0);
        close(dfd);
        CHECK(al_layer_dir_open(tmpl, &l2, &err) == 0);
        struct stat st;
        CHECK(fstatat(lfd, tmp, &st, 0) == 0 && fstatat(lfd, dead, &st, 0) < 0 && errno == ENOENT);
        close(l2);
    }

    /* pip's report */
    size_t n = 0;
    CHECK(python_ok(tfd, "{\"install\":[{\"metadata\":{\"name\":\"tinypkg\",\"version\":\"1.0\"},\"download_info\":"
                         "{\"archive_info\":{\"hashes\":{\"sha256\":\"" "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" "\"}}}},"
                         "{\"metadata\":{\"name\":\"b\",\"version\":\"2\"}}]}", &n) && n == 2);
    CHECK(!python_ok(tfd, "{\"install\":{}}", NULL));
    CHECK(!python_ok(tfd, "not json", NULL));
    CHECK(!python_ok(tfd, "{\"install\":[{\"metadata\":{\"name\":\"a b\",\"version\":\"1\"}}]}", NULL));
    CHECK(!python_ok(tfd, "{\"install\":[{\"metadata\":{\"name\":\"a\",\"version\":\"1\\n\"}}]}", NULL));
    CHECK(!python_ok(tfd, "{\"install\":[{\"metadata\":{\"name\":\"a\",\"version\":1}}]}", NULL));
    CHECK(!python_ok(tfd, "{\"install\":[{\"metadata\":{\"name\":\"a\",\"version\":\"1\"},\"download_info\":"
                          "{\"archive_info\":{\"hashes\":{\"sha256\":\"../../etc\"}}}}]}", NULL));
    /* a report that is a link (the collect never makes one) is not followed */
    unlinkat(tfd, "python-report.json", 0);
    CHECK(symlinkat("/etc/passwd", tfd, "python-report.json") == 0);
    json_t *out = NULL;
    CHECK(al_layer_python_report(tfd, &out, &err) < 0);
    unlinkat(tfd, "python-report.json", 0);
    /* none: an empty list */
    CHECK(al_layer_python_report(tfd, &out, &err) == 0 && json_array_size(out) == 0);
    json_decref(out);
    /* too big */
    {
        size_t big = AL_LAYER_REPORT_MAX + 2;
        char *s = malloc(big);
        memset(s, ' ', big - 1);
        s[0] = '{';
        s[big - 3] = '}';
        s[big - 1] = '\0';
        CHECK(!python_ok(tfd, s, NULL));
        free(s);
    }

    /* npm's lock */
    CHECK(node_ok(tfd, "{\"lockfileVersion\":3,\"packages\":{\"\":{\"dependencies\":{}},\"node_modules/left-pad\":"
                       "{\"version\":\"1.3.0\",\"integrity\":\"sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQEQ==\"},"
                       "\"node_modules/@s/x/node_modules/y\":{\"version\":\"2.0.0\"}}}"));
    CHECK(!node_ok(tfd, "{\"lockfileVersion\":1,\"dependencies\":{}}"));
    CHECK(!node_ok(tfd, "{\"packages\":{\"node_modules/a\":{\"version\":\"1\",\"integrity\":\"x\\u0000y\"}}}"));
    CHECK(!node_ok(tfd, "{\"packages\":{\"elsewhere/a\":{\"version\":\"1\"}}}"));

    /* a commit: complete, then found; a directory without layer.json is no layer */
    char key[65];
    al_layer_key(&w, key);
    CHECK(al_layer_find(lfd, key, NULL, NULL, &err) == 0);
    json_t *meta = json_pack("{s:s, s:[], s:[]}", "key", key, "python", "node");
    CHECK(al_layer_commit(lfd, tmp, key, meta, &err) == 0);
    json_t *got = NULL;
    int dfd = -1;
    CHECK(al_layer_find(lfd, key, &dfd, &got, &err) == 1 && dfd >= 0 && json_equal(got, meta));
    json_decref(got);
    close(dfd);
    /* a layer.json of another key is refused */
    char other[65];
    memset(other, 'c', 64);
    other[64] = '\0';
    char name[80];
    snprintf(name, sizeof name, "sha256-%s", other);
    mkdirat(lfd, name, 0755);
    int ofd = openat(lfd, name, O_RDONLY | O_DIRECTORY);
    put(ofd, "layer.json", "{\"key\":\"nope\"}");
    close(ofd);
    CHECK(al_layer_find(lfd, other, NULL, NULL, &err) < 0);
    CHECK(al_layer_find(lfd, "../../etc", NULL, NULL, &err) < 0);
    /* the lock: held, then another's try times out at once */
    int l1 = -1, l2 = -1;
    CHECK(al_layer_lock(lfd, key, -1, 1000, &l1, &err) == 0);
    CHECK(al_layer_lock(lfd, key, -1, 150, &l2, &err) == -ETIMEDOUT);
    close(l1);
    CHECK(al_layer_lock(lfd, key, -1, 150, &l2, &err) == 0);
    close(l2);
    json_decref(meta);
    close(tfd);
    close(lfd);
    al_rm_tree(AT_FDCWD, tmpl);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
