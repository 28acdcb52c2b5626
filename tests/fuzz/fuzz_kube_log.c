/*
 * Fuzz target for the collect sidecar's log (src/kube/logs.c) and the /out
 * it carries (src/kube/collect.c, box/untar.c, box/collect.c): the bytes
 * between "airlock-out-begin" and "airlock-out-end N" are a base64 tar of
 * /out, written by the box (hostile) and passed on by the API server. The
 * input's first byte picks the chunk size, the rest is the log.
 *
 * What must hold: the decoder ends DONE only on "airlock-out-end N", and
 * then what it wrote is exactly what an independent decoder (nettle's)
 * makes of the same lines; it never writes more than 3/4 of the base64 it
 * took, nor takes more than its bound; fed whole or in chunks it ends the
 * same; the tar, unpacked and collected, leaves only regular files within
 * the caps in the out dir.
 */
#include <nettle/base64.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "kube/kube_int.h"

#define MAX (48u << 10)

static int decode(const uint8_t *d, size_t n, size_t chunk, al_kube_out *o) {
    int fd = memfd_create("fuzz-kube-out", MFD_CLOEXEC);
    al_kube_out_init(o, fd, MAX);
    for (size_t off = 0; off < n; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        FUZZ_CHECK(al_kube_out_feed(o, (const char *)d + off, k) == 0, "feed failed");
    }
    return fd;
}

/* the body lines, as the contract says them, through nettle */
static uint8_t *reference(const uint8_t *d, size_t n, size_t *ret_len, bool *ok) {
    char *text = malloc(n + 1), *p = text;
    size_t i = 0;
    bool in = false;
    while (i < n) {
        const uint8_t *nl = memchr(d + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (d + i)) : n - i;
        const char *l = (const char *)d + i;
        if (!in && len == 17 && memcmp(l, "airlock-out-begin", 17) == 0)
            in = true;
        else if (in && len >= 16 && memcmp(l, "airlock-out-end ", 16) == 0)
            break;
        else if (in && len >= 5 && memcmp(l, "tar: ", 5) == 0)
            ;   /* tar's stderr, merged into the log */
        else if (in)
            for (size_t k = 0; k < len; k++)
                if (l[k] != '\r' && l[k] != ' ')
                    *p++ = l[k];
        i += len + 1;
    }
    uint8_t *out = malloc(n + 1);
    struct base64_decode_ctx ctx;
    base64_decode_init(&ctx);
    size_t dl = n + 1;
    *ok = base64_decode_update(&ctx, &dl, out, (size_t)(p - text), text) && base64_decode_final(&ctx);
    *ret_len = dl;
    free(text);
    return out;
}

/* what collection put in RES (al_box_result_free is box.c's, with the
 * whole box behind it) */
static void result_free(al_box_result *r) {
    for (size_t i = 0; i < r->n_artifacts; i++)
        free(r->artifacts[i].path);
    free(r->artifacts);
    for (size_t i = 0; i < r->n_skipped; i++) {
        free(r->skipped[i].path);
        free(r->skipped[i].why);
    }
    free(r->skipped);
}

static void check_tree(int dirfd, int depth) {
    DIR *d = fdopendir(dup(dirfd));
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        FUZZ_CHECK(fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0, "stat");
        FUZZ_CHECK(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode), "%s is neither a file nor a directory", e->d_name);
        FUZZ_CHECK(!S_ISREG(st.st_mode) || st.st_size <= 4096, "%s past the per-file cap", e->d_name);
        if (S_ISDIR(st.st_mode)) {
            FUZZ_CHECK(depth < 6, "too deep");
            int sub = openat(dirfd, e->d_name, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            check_tree(sub, depth + 1);
            close(sub);
        }
    }
    if (d)
        closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const uint8_t *d = data + 1;
    size_t n = size - 1, chunk = (size_t)data[0] + 1;
    al_kube_out a, b;
    int fa = decode(d, n, n ? n : 1, &a), fb = decode(d, n, chunk, &b);
    FUZZ_CHECK(a.state == b.state && a.seen == b.seen && a.over == b.over, "whole and in chunks differ");
    struct stat st;
    fstat(fa, &st);
    FUZZ_CHECK(a.seen <= MAX, "took %llu bytes over its bound", (unsigned long long)a.seen);
    FUZZ_CHECK((uint64_t)st.st_size <= a.seen / 4 * 3 + 3, "wrote %lld bytes of %llu", (long long)st.st_size,
               (unsigned long long)a.seen);
    if (a.state == AL_KOUT_DONE && !a.over) {
        size_t rl;
        bool ok;
        uint8_t *ref = reference(d, n, &rl, &ok);
        FUZZ_CHECK(ok, "DONE on what nettle refuses");
        uint8_t *mine = malloc((size_t)st.st_size + 1);
        FUZZ_CHECK(pread(fa, mine, (size_t)st.st_size, 0) == st.st_size, "read back");
        FUZZ_CHECK(rl == (size_t)st.st_size && memcmp(ref, mine, rl) == 0, "decoded %lld bytes, nettle %zu",
                   (long long)st.st_size, rl);
        free(ref);
        free(mine);
        /* the tar, unpacked and collected */
        char dir[] = "/tmp/fuzz-kube-XXXXXX";
        if (mkdtemp(dir)) {
            int out = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
            al_box_config cfg = { .out_dirfd = out, .cancel_fd = -1, .stdin_fd = -1 };
            cfg.limits = (al_box_limits){ .max_artifacts = 8, .max_artifact_bytes = 4096, .max_artifacts_total = 16384,
                                          .max_depth = 4, .tmpfs_bytes = 1 << 16 };
            al_box_result res = { 0 };
            al_error err = { 0 };
            al_kube_collect(&cfg, fa, a.over, &res, &err);
            FUZZ_CHECK(res.n_artifacts <= 8, "%zu artifacts", res.n_artifacts);
            check_tree(out, 0);
            result_free(&res);
            char *slash = strrchr(dir, '/');
            *slash = '\0';
            int parent = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
            al_rm_tree(parent, slash + 1);
            close(parent);
            close(out);
        }
    }
    close(fa);
    close(fb);
    return 0;
}
