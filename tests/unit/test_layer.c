/* Unit tests for the package layer store (src/image/layer.c): the key is
 * the set's (order of the specs aside) and changes with every part of it;
 * the reports a layer's list is made from are read as hostile (types,
 * forms, sizes); a layer is complete only with its layer.json, and the
 * commit is a rename of a complete directory. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
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

/* A layer KEY (64 of C) under LFD holding BYTES of data, last used AGE_S
 * seconds before NOW (its used file's mtime). */
static void mk_layer(int lfd, char c, size_t bytes, time_t now, time_t age_s, char ret_key[65]) {
    memset(ret_key, c, 64);
    ret_key[64] = '\0';
    char name[80], json[120];
    snprintf(name, sizeof name, "sha256-%s", ret_key);
    mkdirat(lfd, name, 0755);
    int fd = openat(lfd, name, O_RDONLY | O_DIRECTORY);
    snprintf(json, sizeof json, "{\"key\":\"%s\"}", ret_key);
    put(fd, "layer.json", json);
    mkdirat(fd, "python", 0755);
    int dfd = openat(fd, "python/data", O_WRONLY | O_CREAT, 0644);
    char *buf = calloc(1, bytes);
    if (dfd >= 0 && buf)
        (void)!write(dfd, buf, bytes);
    free(buf);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    al_layer_touch(fd);
    struct timespec t[2] = { { now - age_s, 0 }, { now - age_s, 0 } };
    utimensat(fd, "used", t, 0);
    close(fd);
}

static bool exists(int lfd, const char *key, const char *suffix) {
    char name[100];
    snprintf(name, sizeof name, "sha256-%s%s", key, suffix);
    return faccessat(lfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

static int n_removed;
static char last_why[32];
static void on_removed(void *ud, const al_layer_info *li, const char *why) {
    (void)ud;
    (void)li;
    n_removed++;
    snprintf(last_why, sizeof last_why, "%s", why);
}

/* Garbage collection on a directory of its own: the age rule, then the
 * size bound least recently used first, a layer in use never removed. */
static void test_collect(const char *root) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/gc", root);
    int lfd = -1;
    al_error err = { 0 };
    CHECK(al_layer_dir_open(dir, &lfd, &err) == 0);
    time_t now = time(NULL);
    const time_t day = 86400;
    char a[65], b[65], c[65], d[65], e[65];
    mk_layer(lfd, 'a', 8192, now, 40 * day, a);
    mk_layer(lfd, 'b', 65536, now, 3 * day, b);
    mk_layer(lfd, 'c', 65536, now, 2 * day, c);
    mk_layer(lfd, 'd', 65536, now, 1 * day, d);
    mk_layer(lfd, 'e', 65536, now, 50 * day, e);
    /* e is in use: a run's helper holds its lock shared */
    int use = -1;
    CHECK(al_layer_use(lfd, e, -1, 1000, &use, &err) == 0);
    /* an install's exclusive lock waits for it */
    int ex = -1;
    CHECK(al_layer_lock(lfd, e, -1, 150, &ex, &err) == -ETIMEDOUT);
    al_layer_info *v = NULL;
    size_t n = 0;
    CHECK(al_layer_list(lfd, &v, &n, &err) == 0 && n == 5);
    /* least recently used first */
    CHECK(n == 5 && v[0].key[0] == 'e' && v[1].key[0] == 'a' && v[2].key[0] == 'b' && v[3].key[0] == 'c' &&
          v[4].key[0] == 'd');
    CHECK(n == 5 && v[1].used == now - 40 * day && v[2].bytes >= 65536 && v[1].bytes >= 8192 && v[1].bytes < 65536);
    uint64_t cd = n == 5 ? v[3].bytes + v[4].bytes + v[0].bytes : 0;
    free(v);
    /* the age rule: a (40 days) goes, e (50 days, in use) stays */
    CHECK(al_layer_collect(lfd, now, 30 * day, UINT64_MAX, on_removed, NULL, &err) == 1);
    CHECK(n_removed == 1 && strcmp(last_why, "unused") == 0);
    CHECK(!exists(lfd, a, "") && !exists(lfd, a, ".lock") && exists(lfd, e, "") && exists(lfd, b, ""));
    /* the bound: b, the least recently used of the free ones, goes until under */
    CHECK(al_layer_collect(lfd, now, 30 * day, cd, on_removed, NULL, &err) == 1);
    CHECK(n_removed == 2 && strcmp(last_why, "store_full") == 0);
    CHECK(!exists(lfd, b, "") && exists(lfd, c, "") && exists(lfd, d, "") && exists(lfd, e, ""));
    /* nothing to do: nothing removed */
    CHECK(al_layer_collect(lfd, now, 30 * day, cd, on_removed, NULL, &err) == 0);
    /* the bound again, e held: c (used before d) goes, d stays */
    CHECK(al_layer_collect(lfd, now, -1, cd - 1, on_removed, NULL, &err) == 1 && !exists(lfd, c, "") &&
          exists(lfd, d, "") && exists(lfd, e, ""));
    /* the run ends: e goes by age; its lock, taken again, is a new one */
    close(use);
    CHECK(al_layer_collect(lfd, now, 30 * day, UINT64_MAX, on_removed, NULL, &err) == 1 && !exists(lfd, e, ""));
    CHECK(al_layer_lock(lfd, e, -1, 150, &ex, &err) == 0);
    close(ex);
    CHECK(al_layer_find(lfd, e, NULL, NULL, &err) == 0);
    /* a failed install's lock (no layer) goes with the next collection; a held one stays */
    char f[65], g[65];
    memset(f, 'f', 64);
    f[64] = g[64] = '\0';
    memset(g, '9', 64);
    int gl = -1;
    CHECK(al_layer_lock(lfd, f, -1, 150, &ex, &err) == 0);
    close(ex);
    CHECK(al_layer_lock(lfd, g, -1, 150, &gl, &err) == 0);
    CHECK(exists(lfd, f, ".lock") && exists(lfd, g, ".lock"));
    CHECK(al_layer_collect(lfd, now, 30 * day, UINT64_MAX, on_removed, NULL, &err) == 0);
    CHECK(!exists(lfd, f, ".lock") && exists(lfd, g, ".lock") && exists(lfd, d, ".lock") == false);
    close(gl);
    /* a layer.json's bytes are the layer's size (no walk) */
    mk_layer(lfd, '7', 10, now, 0, g);
    char gn[100];
    snprintf(gn, sizeof gn, "sha256-%s/layer.json", g);
    unlinkat(lfd, gn, 0);
    put(lfd, gn, "{\"bytes\": 123456789}");
    CHECK(al_layer_list(lfd, &v, &n, &err) == 0 && n == 2 && v[1].bytes == 123456789);
    free(v);
    /* no tmp- directory is left behind */
    DIR *dd = al_dir_open(lfd);
    struct dirent *de;
    int tmps = 0;
    while (dd && (de = al_dir_next(dd)))
        tmps += strncmp(de->d_name, "tmp-", 4) == 0;
    if (dd)
        closedir(dd);
    CHECK(tmps == 0);
    close(lfd);
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
    test_collect(tmpl);
    al_rm_tree(AT_FDCWD, tmpl);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
