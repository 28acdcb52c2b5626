/*
 * The run spec's canonical hash (run_spec.h, al_run_spec_hash): what an
 * approval binds and the start of a run checks again. Split from
 * run_spec.c, which builds, checks and records a spec; this file only
 * reads one.
 */
#include <nettle/sha2.h>
#include <stdlib.h>
#include <string.h>

#include "../util/hash.h"
#include "../util/util.h"
#include "run_spec.h"

/*
 * The canonical form a run is hashed in (version 1). Every value is written
 * as its length and then its bytes, every list as its count and then its
 * entries, and every field that may be missing as a presence byte first,
 * in this fixed order, so that the bytes can be read back into exactly one
 * spec: no two specs write the same bytes (("ab", "c") and ("a", "bc")
 * differ in their lengths; no thread and an empty one, no args and an
 * empty list, differ in their presence bytes). JSON's key order, spelling
 * and escapes play no part.
 *
 *   u64(n)    8 bytes, big-endian
 *   text(x)   u64(length of x) || the bytes of x
 *   opt(x)    0x00 when absent | 0x01 || x
 *
 *   "airlock run spec v1\n"        the form and its version
 *   text(language)                 python | node | bash
 *   text(code)
 *   text(image)                    "host" or "sha256:<hex>", as resolved
 *   text(network)                  the policy in canonical form, as resolved
 *   u64(timeout_s) u64(memory_bytes) u64(cpu_millis) u64(pids)
 *   opt(text(thread_id))
 *   text(description)              empty when none was given
 *   opt(u64(n) text(arg)...)       args, in order
 *   u64(n) text(artifact id)...    the artifacts asked for, in order
 *   opt(text(name) text(version) text(digest) text(entrypoint) text(script) text(mode))
 *                                  the skill, for a skill's run
 *   u64(n) [text(name) u64(size) text(sha256)]...
 *                                  the inline files as staged (a skill's
 *                                  args.json among them), by name in byte order
 *   opt(u64(size) text(sha256))    stdin as staged
 *   u64(n) [text(id) text(path) u64(version) u64(size) text(sha256)]...
 *                                  the thread's documents, in staging order;
 *                                  for a sandbox's command pinned for an
 *                                  approval, its home's files instead, each
 *                                  with the id "sandbox-home", its path and
 *                                  version 0 (governance.c)
 *   [0x01 text(sandbox)]           for an E2B sandbox's run only
 *   [0x02 u64(timeout_ms)]         only when the timeout is not whole seconds
 *                                  (asked in ms)
 *   [0x03 u64(n) [text(folder) text(path) u64(size) text(sha256)]...]
 *                                  the connected folders' imports, in the
 *                                  order they were resolved, only when the
 *                                  run has some
 *   [0x04 u64(n) text(spec)... u64(n) text(spec)...]
 *                                  only when packages are asked: the python
 *                                  specs, then the node specs, each in order
 *                                  Each trailer is tagged and absent when it
 *                                  does not apply: every spec without them
 *                                  hashes as it always did, and the
 *                                  documents' count before them keeps the form
 *                                  readable one way.
 *
 * sha256 values are written as their 64 hex digits. The hash is the
 * sha256 of these bytes, as 64 lower-case hex digits.
 */
#define HASH_FORM "airlock run spec v1\n"

static void put_u64(struct sha256_ctx *c, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (56 - 8 * i));
    sha256_update(c, sizeof b, b);
}

static void put_bytes(struct sha256_ctx *c, const void *s, size_t len) {
    put_u64(c, len);
    if (len)
        sha256_update(c, len, s);
}

static void put_str(struct sha256_ctx *c, const char *s) { put_bytes(c, s ? s : "", s ? strlen(s) : 0); }

static void put_text(struct sha256_ctx *c, const al_run_text *t) { put_bytes(c, t->s ? t->s : "", t->s ? t->len : 0); }

static void put_flag(struct sha256_ctx *c, bool present) {
    uint8_t f = present ? 1 : 0;
    sha256_update(c, 1, &f);
}

/* A trailer's tag (the form above): what tells one trailer from another */
static void put_tag(struct sha256_ctx *c, uint8_t tag) { sha256_update(c, 1, &tag); }

static int cmp_input(const void *a, const void *b) {
    const al_run_input_id *x = *(const al_run_input_id *const *)a, *y = *(const al_run_input_id *const *)b;
    int r = strcmp(x->name ? x->name : "", y->name ? y->name : "");
    /* two inputs of one name cannot be staged; ordered all the same, so that
     * the hash does not depend on the order they came in */
    if (r == 0)
        r = strcmp(x->sha256, y->sha256);
    if (r == 0)
        r = x->size < y->size ? -1 : x->size > y->size;
    return r;
}

void al_run_spec_hash(const al_run_spec *sp, const al_run_staged *st, char out[65]) {
    static const al_run_staged nothing = { 0 };
    if (!st)
        st = &nothing;
    /* the files by name: a sorted copy of their addresses */
    const al_run_input_id **files = calloc(st->n_files + 1, sizeof *files);
    if (!files) {
        out[0] = '\0'; /* no hash: whoever asked refuses */
        return;
    }
    for (size_t i = 0; i < st->n_files; i++)
        files[i] = &st->files[i];
    if (st->n_files > 1)
        qsort(files, st->n_files, sizeof *files, cmp_input);
    struct sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, strlen(HASH_FORM), (const uint8_t *)HASH_FORM);
    put_text(&c, &sp->language);
    put_text(&c, &sp->code);
    put_text(&c, &sp->image);
    put_text(&c, &sp->network);
    put_u64(&c, (uint64_t)sp->limits.timeout_s);
    put_u64(&c, (uint64_t)sp->limits.memory_bytes);
    put_u64(&c, (uint64_t)sp->limits.cpu_millis);
    put_u64(&c, (uint64_t)sp->limits.pids);
    put_flag(&c, sp->thread_id.s != NULL);
    if (sp->thread_id.s)
        put_text(&c, &sp->thread_id);
    put_text(&c, &sp->description);
    put_flag(&c, sp->has_args);
    if (sp->has_args) {
        put_u64(&c, sp->n_args);
        for (size_t i = 0; i < sp->n_args; i++)
            put_text(&c, &sp->args[i]);
    }
    put_u64(&c, sp->n_artifacts);
    for (size_t i = 0; i < sp->n_artifacts; i++)
        put_text(&c, &sp->artifacts[i]);
    const al_run_skill *k = sp->skill;
    put_flag(&c, k != NULL);
    if (k) {
        put_str(&c, k->name);
        put_str(&c, k->version);
        put_str(&c, k->digest);
        put_str(&c, k->entrypoint);
        put_str(&c, k->script);
        put_str(&c, k->mode);
    }
    put_u64(&c, st->n_files);
    for (size_t i = 0; i < st->n_files; i++) {
        put_str(&c, files[i]->name);
        put_u64(&c, files[i]->size);
        put_str(&c, files[i]->sha256);
    }
    free(files);
    put_flag(&c, st->has_stdin);
    if (st->has_stdin) {
        put_u64(&c, st->stdin_id.size);
        put_str(&c, st->stdin_id.sha256);
    }
    put_u64(&c, st->n_docs);
    for (size_t i = 0; i < st->n_docs; i++) {
        put_str(&c, st->docs[i].id);
        put_str(&c, st->docs[i].path);
        put_u64(&c, (uint64_t)st->docs[i].version);
        put_u64(&c, st->docs[i].size);
        put_str(&c, st->docs[i].sha256);
    }
    if (sp->sandbox.s) {
        put_flag(&c, true);
        put_text(&c, &sp->sandbox);
    }
    if (sp->limits.timeout_ms != sp->limits.timeout_s * 1000) {
        put_tag(&c, 2);
        put_u64(&c, (uint64_t)sp->limits.timeout_ms);
    }
    if (st->n_imports) {
        put_tag(&c, 3);
        put_u64(&c, st->n_imports);
        for (size_t i = 0; i < st->n_imports; i++) {
            put_str(&c, st->imports[i].folder);
            put_str(&c, st->imports[i].path);
            put_u64(&c, st->imports[i].size);
            put_str(&c, st->imports[i].sha256);
        }
    }
    if (al_run_spec_wants_packages(sp)) {
        put_tag(&c, 4);
        for (size_t l = 0; l < _AL_PKG_LANG_MAX; l++) {
            put_u64(&c, sp->n_packages[l]);
            for (size_t i = 0; i < sp->n_packages[l]; i++)
                put_text(&c, &sp->packages[l][i]);
        }
    }
    al_sha256_finish_hex(&c, out);
}
