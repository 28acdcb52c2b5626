/* The service's signed checkpoints (checkpoint.h): a thread that logs the
 * signed head of each chain that moved, and the one signer behind it and
 * GET /v1/audit/checkpoint. The last head signed of each chain is kept in
 * the state directory too (audit.heads), outside the store: a chain cut
 * back while the service was stopped is seen at its next start by whoever
 * could write the database but not the state directory. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "service.h"
#include "service_int.h"
#include "../store/audit.h"

/* The last head signed of one chain. */
typedef struct signed_head {
    al_audit_head h;
    bool rewritten;               /* the chain no longer holds H: logged once, never signed again */
} signed_head;

struct al_checkpointer {
    al_checkpoint_key key;
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;           /* guards all below; held while a head is checked and signed */
    pthread_cond_t cond;
    bool stop;
    signed_head *heads;
    size_t n, cap;
    bool dirty;                   /* HEADS changed since they were saved */
    char heads_path[PATH_MAX + 32];
};

static signed_head *find(al_checkpointer *c, const char *ws) {
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->heads[i].h.workspace_id, ws) == 0)
            return &c->heads[i];
    return NULL;
}

/* A new entry at the end of C->heads, or NULL. */
static signed_head *add(al_checkpointer *c) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        signed_head *v = realloc(c->heads, cap * sizeof *v);
        if (!v)
            return NULL;
        c->heads = v;
        c->cap = cap;
    }
    memset(&c->heads[c->n], 0, sizeof c->heads[c->n]);
    return &c->heads[c->n++];
}

/* The heads signed before the last stop, one WS:SEQ:HASH a line. */
static void heads_load(al_service *s, al_checkpointer *c) {
    _cleanup_fclose_ FILE *f = fopen(c->heads_path, "re");
    if (!f) {
        if (errno != ENOENT)
            al_service_log(s, AL_LOG_ERROR, "audit.heads_unreadable", json_pack("{s:s, s:s}", "path", c->heads_path, "error",
                                                                  strerror(errno)));
        return;
    }
    char line[256];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        al_audit_head h;
        al_error err = { 0 };
        signed_head *e;
        if (al_audit_head_parse(line, &h, &err) < 0)
            al_service_log(s, AL_LOG_ERROR, "audit.heads_unreadable", json_pack("{s:s, s:s}", "path", c->heads_path, "error", err.msg));
        else if (!find(c, h.workspace_id) && (e = add(c)))
            *e = (signed_head){ .h = h };
    }
}

/* C->heads into their file, whole or not at all (under C->mu). */
static void heads_save_locked(al_service *s, al_checkpointer *c) {
    if (!c->dirty)
        return;
    char tmp[sizeof c->heads_path + 8];
    snprintf(tmp, sizeof tmp, "%s.new", c->heads_path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    _cleanup_fclose_ FILE *f = fd >= 0 ? fdopen(fd, "we") : NULL;
    if (!f && fd >= 0)
        close(fd);
    bool ok = f != NULL;
    for (size_t i = 0; ok && i < c->n; i++)
        ok = fprintf(f, "%s:%lld:%s\n", c->heads[i].h.workspace_id, (long long)c->heads[i].h.seq,
                     c->heads[i].h.hash) > 0;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0 && rename(tmp, c->heads_path) == 0;
    if (!ok) {
        al_service_log(s, AL_LOG_ERROR, "audit.heads_failed", json_pack("{s:s, s:s}", "path", c->heads_path, "error", strerror(errno)));
        unlink(tmp);
        return;
    }
    c->dirty = false;
}

/* Whether the chain of LAST still holds LAST's head, at its seq with its
 * hash (under C->mu); when not, LAST is marked and that is logged once.
 * HEAD is the head just read. 0 held, -ESTALE not, -errno. */
static int still_held(al_service *s, signed_head *last, const al_audit_head *head, al_error *err) {
    if (!last->rewritten) {
        char at[65] = "";
        int r = al_store_audit_hash_at(s->store, last->h.workspace_id, last->h.seq, at, err);
        if (r < 0 && r != -ENOENT)
            return r;
        if (r == 0 && strcmp(at, last->h.hash) == 0)
            return 0;
        last->rewritten = true;
        al_service_log(s, AL_LOG_ERROR, "audit.head_rewritten",
                       json_pack("{s:s, s:I, s:s, s:I, s:s, s:s}", "workspace_id", head->workspace_id, "signed_seq",
                                 (json_int_t)last->h.seq, "signed_hash", last->h.hash, "head_seq",
                                 (json_int_t)head->seq, "head_hash", head->hash, "why",
                                 "the chain no longer holds the head this service signed: cut back or rewritten "
                                 "in the store; no further checkpoint of it is signed"));
    }
    return al_err(err, "audit", ESTALE, "the audit chain of %s no longer holds the head %lld:%s this service "
                  "signed: it was cut back or rewritten in the store, and is not signed again",
                  head->workspace_id, (long long)last->h.seq, last->h.hash);
}

/* Sign *HEAD of its chain, if the chain still holds the head signed before
 * it (under C->mu), and log it when it is new. A HEAD read before a newer
 * one was signed (two signers raced) is that newer one instead: *HEAD
 * says what was signed. 0 signed, 1 already signed (unless FORCE: signed
 * again), -ESTALE not signed, -errno. */
static int sign_locked(al_service *s, al_checkpointer *c, al_audit_head *head, bool force, char **ret_text,
                       al_error *err) {
    *ret_text = NULL;
    signed_head *last = find(c, head->workspace_id);
    if (last && !last->rewritten && head->seq == last->h.seq && strcmp(last->h.hash, head->hash) == 0 && !force)
        return 1;
    if (last) {
        int r = still_held(s, last, head, err);
        if (r < 0)
            return r;
        if (head->seq < last->h.seq) {
            /* held: HEAD was read before the newer one was signed */
            *head = last->h;
            if (!force)
                return 1;
        }
    }
    int r = al_checkpoint_sign(&c->key, head, ret_text, err);
    if (r < 0)
        return r;
    /* every head signed is in the log, whoever asked for it */
    if (!last || last->h.seq != head->seq || strcmp(last->h.hash, head->hash) != 0)
        al_service_log(s, AL_LOG_INFO, "audit.checkpoint", json_pack("{s:s, s:I, s:s, s:s}", "workspace_id", head->workspace_id,
                                                        "seq", (json_int_t)head->seq, "hash", head->hash, "checkpoint",
                                                        *ret_text));
    if (!last && !(last = add(c))) {
        free(*ret_text);
        *ret_text = NULL;
        return al_err(err, "audit", ENOMEM, "out of memory");
    }
    if (last->h.seq != head->seq || strcmp(last->h.hash, head->hash) != 0)
        c->dirty = true;
    *last = (signed_head){ .h = *head };
    return 0;
}

static int log_head(const char *ws, int64_t seq, const char *hash, void *userdata) {
    al_service *s = userdata;
    al_checkpointer *c = s->checkpointer;
    al_audit_head h = { .seq = seq };
    snprintf(h.workspace_id, sizeof h.workspace_id, "%s", ws);
    snprintf(h.hash, sizeof h.hash, "%s", hash);
    al_error err = { 0 };
    char *text = NULL;
    pthread_mutex_lock(&c->mu);
    int r = sign_locked(s, c, &h, false, &text, &err);
    pthread_mutex_unlock(&c->mu);
    if (r < 0 && r != -ESTALE)
        al_service_log(s, AL_LOG_ERROR, "audit.checkpoint_failed", json_pack("{s:s, s:s}", "workspace_id", ws, "error", err.msg));
    free(text);
    return 0;
}

static void round_of_heads(al_service *s) {
    al_error err = { 0 };
    if (al_store_audit_heads(s->store, NULL, log_head, s, &err) < 0)
        al_service_log(s, AL_LOG_ERROR, "audit.checkpoint_failed", json_pack("{s:s}", "error", err.msg));
    pthread_mutex_lock(&s->checkpointer->mu);
    heads_save_locked(s, s->checkpointer);
    pthread_mutex_unlock(&s->checkpointer->mu);
}

static void *checkpointer_main(void *p) {
    al_service *s = p;
    al_checkpointer *c = s->checkpointer;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        pthread_mutex_unlock(&c->mu);
        round_of_heads(s);
        pthread_mutex_lock(&c->mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += s->cfg.audit_checkpoint_s;
        while (!c->stop && pthread_cond_timedwait(&c->cond, &c->mu, &ts) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&c->mu);
    /* the heads as the service leaves them */
    round_of_heads(s);
    return NULL;
}

int al_checkpointer_start(al_service *s, al_error *err) {
    al_checkpointer *c = calloc(1, sizeof *c);
    if (!c)
        return al_err(err, "audit", ENOMEM, "out of memory");
    char path[sizeof s->cfg.audit_key + sizeof s->cfg.state_dir + 16];
    if (s->cfg.audit_key[0])
        snprintf(path, sizeof path, "%s", s->cfg.audit_key);
    else
        snprintf(path, sizeof path, "%s/%s", s->cfg.state_dir, AL_CHECKPOINT_KEY_FILE);
    int r = al_checkpoint_key_load(path, true, &c->key, err);
    if (r < 0) {
        free(c);
        return r;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cond, NULL);
    s->checkpointer = c;
    snprintf(c->heads_path, sizeof c->heads_path, "%s/%s", s->cfg.state_dir, AL_CHECKPOINT_HEADS_FILE);
    heads_load(s, c);
    char v[AL_CHECKPOINT_VERIFIER_MAX];
    al_checkpoint_key_verifier(&c->key, v);
    al_service_log(s, AL_LOG_INFO, "audit.key", json_pack("{s:s, s:s}", "path", path, "verifier_key", v));
    if (pthread_create(&c->thread, NULL, checkpointer_main, s) != 0)
        return al_err(err, "audit", EAGAIN, "start the audit checkpointer");
    c->running = true;
    return 0;
}

void al_checkpointer_stop(al_service *s) {
    al_checkpointer *c = s->checkpointer;
    if (!c)
        return;
    if (c->running) {
        pthread_mutex_lock(&c->mu);
        c->stop = true;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mu);
    free(c->heads);
    memset(&c->key, 0, sizeof c->key);
    free(c);
    s->checkpointer = NULL;
}

typedef struct one_head {
    al_audit_head h;
    bool found;
} one_head;

static int take_head(const char *ws, int64_t seq, const char *hash, void *userdata) {
    one_head *o = userdata;
    snprintf(o->h.workspace_id, sizeof o->h.workspace_id, "%s", ws);
    o->h.seq = seq;
    snprintf(o->h.hash, sizeof o->h.hash, "%s", hash);
    o->found = true;
    return 0;
}

int al_checkpointer_sign_now(al_service *s, const char *workspace_id, char **ret_text, al_audit_head *ret_head,
                             al_error *err) {
    al_checkpointer *c = s->checkpointer;
    one_head o = { 0 };
    int r = al_store_audit_heads(s->store, workspace_id, take_head, &o, err);
    if (r < 0)
        return r;
    if (!o.found)
        return al_err(err, "audit", ENOENT, "the workspace %s has no audit events yet", workspace_id);
    pthread_mutex_lock(&c->mu);
    r = sign_locked(s, c, &o.h, true, ret_text, err);
    heads_save_locked(s, c);
    pthread_mutex_unlock(&c->mu);
    if (r < 0)
        return r;
    *ret_head = o.h;
    return 0;
}

bool al_checkpointer_last(al_service *s, const char *workspace_id, al_audit_head *ret) {
    al_checkpointer *c = s->checkpointer;
    if (!c)
        return false;
    pthread_mutex_lock(&c->mu);
    signed_head *h = find(c, workspace_id);
    bool got = h != NULL;
    if (got)
        *ret = h->h;
    pthread_mutex_unlock(&c->mu);
    return got;
}

void al_checkpointer_verifier(al_service *s, char buf[AL_CHECKPOINT_VERIFIER_MAX]) {
    al_checkpoint_key_verifier(&s->checkpointer->key, buf);
}
