/*
 * Fuzz target for what a skill's author controls: skill.json (the manifest
 * and its input schemas, then arguments checked against them) and the
 * uploaded archive, unpacked into a fresh directory. LLVMFuzzerTestOneInput
 * is libFuzzer's entry point; without libFuzzer, main() mutates seeds with a
 * fixed-seed PRNG (tar headers get their checksums fixed after mutation, so
 * the mutations reach past libarchive's header check into our rules).
 *
 * What must hold: a manifest that parses has a valid name and scripts with
 * valid paths; an unpacked tree holds only directories and regular files,
 * within the caps, and nothing is ever created outside its directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "service/skills.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[64];                 /* our scratch: holds only "t" between inputs */
static long n_manifest, n_args_ok, n_unpacked, n_refused, n_tar;

typedef struct walk {
    unsigned files, entries;
    uint64_t bytes;
} walk;

/* Check the unpacked tree at DIRFD: directories and regular files only. */
static void check_tree(int dirfd, unsigned depth, walk *w) {
    if (depth > AL_SKILL_DEPTH_MAX)
        abort();
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d)
        abort();
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            abort();
        w->entries++;
        if (S_ISDIR(st.st_mode)) {
            if ((st.st_mode & 07777) != 0755)
                abort();
            int sub = openat(dirfd, de->d_name, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0)
                abort();
            check_tree(sub, depth + 1, w);
            close(sub);
        } else if (S_ISREG(st.st_mode)) {
            if ((st.st_mode & 07777) != 0644 && (st.st_mode & 07777) != 0755)
                abort();
            w->files++;
            w->bytes += (uint64_t)st.st_size;
        } else {
            abort(); /* a link, device or fifo got through */
        }
    }
    closedir(d);
}

static void try_unpack(const uint8_t *data, size_t size) {
    int rootfd = open(root, O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0 || mkdirat(rootfd, "t", 0755) < 0)
        abort();
    int t = openat(rootfd, "t", O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (t < 0)
        abort();
    al_error err = { 0 };
    int r = al_skill_unpack(t, data, size, &err);
    if (r == 0) {
        n_unpacked++;
        walk w = { 0 };
        check_tree(t, 1, &w);
        if (w.files > AL_SKILL_FILES_MAX || w.bytes > AL_SKILL_BYTES_MAX)
            abort();
    } else {
        n_refused++;
        if (!err.msg[0])
            abort(); /* every refusal says why */
    }
    close(t);
    al_rm_tree(rootfd, "t");
    /* nothing escaped: our scratch is empty again */
    int fd = dup(rootfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            abort();
    if (d)
        closedir(d);
    close(rootfd);
}

static void try_manifest(const uint8_t *data, size_t size) {
    json_t *m = NULL;
    al_error err = { 0 };
    if (al_skill_manifest_parse((const char *)data, size, &m, &err) < 0) {
        if (!err.msg[0])
            abort();
        return;
    }
    n_manifest++;
    if (!al_skill_name_valid(json_string_value(json_object_get(m, "name"))))
        abort();
    size_t i;
    json_t *ep;
    json_array_foreach(json_object_get(m, "entrypoints"), i, ep) {
        al_error e2 = { 0 };
        if (al_skill_path_check(json_string_value(json_object_get(ep, "script")), NULL, &e2) < 0)
            abort();
        if (al_skill_entrypoint(m, json_string_value(json_object_get(ep, "name"))) == NULL)
            abort();
        /* the schema's own examples (and defaults) as arguments: any answer, no crash */
        json_t *sc = json_object_get(ep, "input_schema");
        json_t *ex = json_object_get(sc, "examples");
        size_t k;
        json_t *a;
        json_array_foreach(ex, k, a) {
            al_error e3 = { 0 };
            if (al_skill_args_validate(sc, a, &e3) == 0)
                n_args_ok++;
            else if (!e3.msg[0])
                abort();
        }
    }
    json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!root[0]) {
        snprintf(root, sizeof root, "/tmp/fuzz-skill-XXXXXX");
        if (!mkdtemp(root))
            abort();
    }
    /* an exact-size heap copy, so a read past the end is caught */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if (size && buf[0] != '{') {
        n_tar++;
        try_unpack(buf, size);
    } else {
        try_manifest(buf, size);
    }
    free(buf);
    return 0;
}

#ifndef AIRLOCK_LIBFUZZER
static const char *const manifests[] = {
    "{\"name\": \"s\", \"version\": \"1.0\", \"description\": \"d\", \"entrypoints\": [{\"name\": \"e\", "
    "\"language\": \"python\", \"script\": \"e.py\", \"description\": \"d\", \"input_schema\": {\"type\": \"object\", "
    "\"required\": [\"a\"], \"additionalProperties\": false, \"properties\": {\"a\": {\"type\": \"string\", "
    "\"maxLength\": 3, \"enum\": [\"x\", \"yy\"]}, \"n\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 9}, "
    "\"l\": {\"type\": \"array\", \"maxItems\": 2, \"items\": {\"type\": \"number\"}}}, "
    "\"examples\": [{\"a\": \"x\"}, {\"a\": \"yy\", \"n\": 3, \"l\": [1.5]}, {\"a\": 1}, {}]}}]}",
    "{\"name\": \"t-2\", \"version\": \"2\", \"description\": \"d\", \"image\": \"host\", \"entrypoints\": ["
    "{\"name\": \"a\", \"language\": \"bash\", \"script\": \"lib/a.sh\", \"description\": \"d\", \"timeout_s\": 5, "
    "\"input_schema\": {\"type\": \"object\", \"properties\": {\"o\": {\"type\": \"object\", \"properties\": "
    "{\"b\": {\"type\": \"boolean\"}}}}, \"examples\": [{\"o\": {\"b\": true}}, {\"o\": []}]}}]}",
};

/* One ustar header (and data) at OUT; returns the bytes written. */
static size_t tar_entry(uint8_t *out, const char *name, char type, const char *link, const char *data) {
    memset(out, 0, 512);
    size_t n = data ? strlen(data) : 0;
    snprintf((char *)out, 100, "%s", name);
    snprintf((char *)out + 100, 8, "%07o", type == '5' ? 0755 : 0644);
    snprintf((char *)out + 108, 8, "%07o", 0);
    snprintf((char *)out + 116, 8, "%07o", 0);
    snprintf((char *)out + 124, 12, "%011zo", n);
    snprintf((char *)out + 136, 12, "%011o", 0);
    out[156] = (uint8_t)type;
    if (link)
        snprintf((char *)out + 157, 100, "%s", link);
    memcpy(out + 257, "ustar\0" "00", 8);
    size_t used = 512;
    if (n) {
        memcpy(out + 512, data, n);
        memset(out + 512 + n, 0, (512 - n % 512) % 512);
        used += (n + 511) / 512 * 512;
    }
    return used;
}

/* Recompute the checksum of every block that looks like a ustar header. */
static void fix_checksums(uint8_t *buf, size_t len) {
    for (size_t at = 0; at + 512 <= len; at += 512) {
        uint8_t *h = buf + at;
        if (memcmp(h + 257, "ustar", 5) != 0)
            continue;
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int i = 0; i < 512; i++)
            sum += h[i];
        snprintf((char *)h + 148, 8, "%06o", sum);
        h[155] = ' ';
    }
}

#include "mutate.h"

/* the tar-aware mutations below draw from the shared PRNG */
#define next fuzz_next

#define BUF_MAX 16384

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    double budget = argc > 2 ? atof(argv[2]) : 20.0;
    static uint8_t tars[4][BUF_MAX];
    size_t tar_len[4] = { 0 };
    /* a good bundle; one with links and a device; one with traversal; one deep */
    tar_len[0] += tar_entry(tars[0] + tar_len[0], "skill.json", '0', NULL, manifests[1]);
    tar_len[0] += tar_entry(tars[0] + tar_len[0], "lib/", '5', NULL, NULL);
    tar_len[0] += tar_entry(tars[0] + tar_len[0], "lib/a.sh", '0', NULL, "echo hi\n");
    tar_len[1] += tar_entry(tars[1] + tar_len[1], "./x", '0', NULL, "x");
    tar_len[1] += tar_entry(tars[1] + tar_len[1], "l", '2', NULL, NULL);
    memcpy(tars[1] + tar_len[1] - 512 + 157, "/etc/passwd", 11);
    tar_len[1] += tar_entry(tars[1] + tar_len[1], "h", '1', "x", NULL);
    tar_len[1] += tar_entry(tars[1] + tar_len[1], "d", '3', NULL, NULL);
    tar_len[2] += tar_entry(tars[2] + tar_len[2], "a/../../b", '0', NULL, "b");
    tar_len[2] += tar_entry(tars[2] + tar_len[2], "/abs", '0', NULL, "c");
    tar_len[3] += tar_entry(tars[3] + tar_len[3], "1/2/3/4/5/6/7/8", '0', NULL, "d");
    tar_len[3] += tar_entry(tars[3] + tar_len[3], "1/2/3/4/5/6/7/8/9/x", '0', NULL, "e");
    for (int k = 0; k < 4; k++) {
        memset(tars[k] + tar_len[k], 0, 1024); /* the end-of-archive blocks */
        tar_len[k] += 1024;
        fix_checksums(tars[k], tar_len[k]);
    }
    static const char *const dict[] = { "{", "}", "[", "]", ",", ":", "\"", "\"type\"", "\"object\"", "\"string\"",
                                        "\"integer\"", "\"properties\"", "\"items\"", "\"enum\"", "\"required\"",
                                        "\"maxLength\"", "-1", "1e308", "null", "true", "\"../\"", "/", "..", "\\u0000",
                                        "\x00", "\xff", "5", "2", "1", "0000777" };
    static uint8_t buf[BUF_MAX + 64];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long i = 0;
    for (; i < iters; i++) {
        int is_tar = (int)(next() % 2);
        size_t len;
        if (is_tar) {
            int k = (int)(next() % 4);
            len = tar_len[k];
            memcpy(buf, tars[k], len);
        } else {
            const char *seed = manifests[next() % 2];
            len = strlen(seed);
            memcpy(buf, seed, len);
        }
        int muts = 1 + (int)(next() % 6);
        for (int m = 0; m < muts; m++) {
            /* in a tar, aim at the first header's fields most of the time */
            size_t span = is_tar && next() % 4 ? 512 : len;
            size_t at = span ? next() % span : 0;
            switch (next() % 5) {
            case 0:
                if (len)
                    buf[at % len] ^= (uint8_t)(1u << (next() % 8));
                break;
            case 1:
                if (len)
                    buf[at % len] = (uint8_t)next();
                break;
            case 2: { /* overwrite with a dictionary word (keeps tar blocks aligned) */
                const char *w = dict[next() % (sizeof dict / sizeof dict[0])];
                size_t n = w[0] ? strlen(w) : 1;
                if (at + n <= len)
                    memcpy(buf + at, w, n);
                break;
            }
            case 3: /* insert a word (JSON only: a tar would lose its alignment) */
                if (!is_tar) {
                    const char *w = dict[next() % (sizeof dict / sizeof dict[0])];
                    size_t n = w[0] ? strlen(w) : 1;
                    if (len + n < BUF_MAX && at <= len) {
                        memmove(buf + at + n, buf + at, len - at);
                        memcpy(buf + at, w, n);
                        len += n;
                    }
                }
                break;
            default: /* truncate */
                if (!is_tar || next() % 8 == 0)
                    len = at <= len ? at : len;
                break;
            }
        }
        if (is_tar) {
            fix_checksums(buf, len);
            /* small mutated tars stay tars: pad to a block */
            if (len < 512) {
                memset(buf + len, 0, 512 - len);
                len = 512;
            }
        }
        LLVMFuzzerTestOneInput(buf, len);
        if ((i & 255) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if ((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9 > budget)
                break;
        }
    }
    rmdir(root);
    printf("fuzz_skill: %ld inputs, no crash; %ld manifests valid (%ld argument sets valid); %ld archives: "
           "%ld unpacked, %ld refused\n", i, n_manifest, n_args_ok, n_tar, n_unpacked, n_refused);
    /* the mutations must keep reaching the deep paths */
    return n_manifest > 0 && n_args_ok > 0 && n_unpacked > 0 && n_refused > 0 ? 0 : 1;
}
#endif
