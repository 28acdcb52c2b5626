/* What both backends share: the handle and its pool of connections,
 * units of work (a nested one is a savepoint), the numbered migrations,
 * ids and times. See backend.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "backend.h"

static bool is_postgresql(const char *target) {
    return strncmp(target, "postgresql://", 13) == 0 || strncmp(target, "postgres://", 11) == 0;
}

int al_store_locate(const char *setting, const char *state_dir, char *buf, size_t len, al_error *err) {
    int n;
    if (!setting || !*setting || strcmp(setting, "sqlite") == 0)
        n = snprintf(buf, len, "%s/airlock.db", state_dir);
    else if (is_postgresql(setting))
        n = snprintf(buf, len, "%s", setting);
    else
        return al_err(err, "config", EINVAL, "store = %s: want sqlite or a postgresql://USER@HOST/DB address", setting);
    if (n < 0 || (size_t)n >= len)
        return al_err(err, "config", ENAMETOOLONG, "store: the address is too long");
    return 0;
}

bool al_store_is_embedded(const char *target) { return !is_postgresql(target); }

const al_store_backend *al_store_backend_for(const char *target) {
    return is_postgresql(target) ? &al_store_postgresql : &al_store_sqlite;
}

const char *al_store_backend_name(const al_store *s) { return s->be->name; }

void al_store_get_stats(al_store *s, al_store_stats *ret) {
    pthread_mutex_lock(&s->mu);
    *ret = s->stats;
    pthread_mutex_unlock(&s->mu);
    ret->has_steps = s->be->take_steps != NULL;
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- the pool */

/* Under MU. */
static al_store_conn *held_locked(al_store *s) {
    pthread_t self = pthread_self();
    for (int i = 0; i < s->n_conns; i++)
        if (s->conns[i].busy && s->conns[i].depth > 0 && pthread_equal(s->conns[i].owner, self))
            return &s->conns[i];
    return NULL;
}

al_store_conn *al_store_held(al_store *s) {
    pthread_mutex_lock(&s->mu);
    al_store_conn *c = held_locked(s);
    pthread_mutex_unlock(&s->mu);
    return c;
}

al_store_conn *al_store_take(al_store *s) {
    pthread_mutex_lock(&s->mu);
    al_store_conn *c = held_locked(s);
    while (!c) {
        for (int i = 0; i < s->n_conns && !c; i++)
            if (!s->conns[i].busy)
                c = &s->conns[i];
        if (c) {
            c->busy = true;
            c->owner = pthread_self();
            break;
        }
        if (s->n_conns < s->max_conns && !s->opening && mono_ns() >= s->grow_after_ns) {
            /* all busy: one more, opened outside the lock (a connection
             * takes a while); the others wait for it or for a free one */
            s->opening = true;
            pthread_mutex_unlock(&s->mu);
            void *conn = NULL;
            al_error e = { 0 };
            int r = s->be->open(s->target, &conn, &e);
            pthread_mutex_lock(&s->mu);
            s->opening = false;
            if (r == 0) {
                c = &s->conns[s->n_conns++];
                *c = (al_store_conn){ .conn = conn, .busy = true, .owner = pthread_self(),
                                      .session = s->be->session ? s->be->session(conn) : 0 };
                break;
            }
            /* e.g. the server's max_connections: the pool makes do for a while */
            s->grow_after_ns = mono_ns() + 10ull * 1000000000u;
            pthread_cond_broadcast(&s->freed);
            continue;
        }
        pthread_cond_wait(&s->freed, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return c;
}

/* Under MU. */
static void put_locked(al_store *s, al_store_conn *c) {
    if (s->be->session)
        c->session = s->be->session(c->conn); /* a reconnect makes a new one */
    if (c->depth == 0) {
        c->busy = false;
        pthread_cond_signal(&s->freed);
    }
}

void al_store_put(al_store *s, al_store_conn *c) {
    pthread_mutex_lock(&s->mu);
    put_locked(s, c);
    pthread_mutex_unlock(&s->mu);
}

/* Under MU: count one statement of C (the caller's) that began at T0
 * (mono_ns), and the engine's work since the last count on C. */
static void count(al_store *s, al_store_conn *c, uint64_t t0, bool failed) {
    s->stats.statements++;
    s->stats.failures += failed;
    s->stats.busy_ns += mono_ns() - t0;
    if (s->be->take_steps)
        s->stats.steps += s->be->take_steps(c->conn);
}

/* Count a statement and give C back. */
static void done(al_store *s, al_store_conn *c, uint64_t t0, bool failed) {
    pthread_mutex_lock(&s->mu);
    count(s, c, t0, failed);
    put_locked(s, c);
    pthread_mutex_unlock(&s->mu);
}

/* A parameterless statement in the calling thread's unit of work. */
static int unit_script(al_store *s, al_error *err, const char *sql) {
    al_store_conn *c = al_store_held(s);
    if (!c)
        return al_err(err, "store", EINVAL, "%s outside a unit of work", sql);
    uint64_t t0 = mono_ns();
    int r = s->be->script(c->conn, err, sql);
    done(s, c, t0, r < 0);
    return r;
}

/* Apply the migrations this database lacks, in order, as one unit of work
 * under the "migrations" lock: nodes that start together on one database
 * apply each exactly once. */
static int migrate(al_store *s, al_error *err) {
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    if ((r = al_store_lock(s, err, "migrations")) < 0 ||
        (r = unit_script(s, err,
                         "CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")) < 0)
        goto fail;
    for (size_t i = 0; i < s->be->n_migrations; i++) {
        const al_migration *m = &s->be->migrations[i];
        json_t *done_rows = al_store_query(s, err, "SELECT version FROM schema_migrations WHERE version = ?", "s", m->name);
        if (!done_rows) {
            r = -EIO;
            goto fail;
        }
        size_t n = json_array_size(done_rows);
        json_decref(done_rows);
        if (n)
            continue;
        char now[40];
        al_store_now(now, sizeof now);
        if ((r = unit_script(s, err, m->text)) < 0 ||
            (r = al_store_exec(s, err, "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)", "ss", m->name,
                               now)) < 0) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err && err->msg[0] ? err->msg : "failed");
            al_err(err, "store", EIO, "migration %s: %s", m->name, why);
            goto fail;
        }
    }
    return al_store_commit(s, err);
fail:
    al_store_rollback(s);
    return r < 0 ? r : -EIO;
}

/* Whether the first connection C reaches a store that airlock made: its
 * migrations table has a row. */
static bool made_by_airlock(al_store *s) {
    al_error e = { 0 };
    json_t *rows = al_store_query(s, &e, "SELECT version FROM schema_migrations LIMIT 1", "");
    bool made = rows && json_array_size(rows) > 0;
    json_decref(rows);
    return made;
}

static int open_store(const char *target, bool create, al_store **ret, al_error *err) {
    /* SQLite would make an empty file of a mistyped path: an admin command
     * would then answer "no audit events yet" about a store that is not */
    if (!create && !is_postgresql(target) && access(target, F_OK) != 0)
        return al_err(err, "store", ENOENT, "no airlock store at %s (only `airlock admin bootstrap` or `airlock serve` "
                                           "creates one: is --state or --store right?)", target);
    al_store *s = calloc(1, sizeof *s);
    if (!s || !(s->target = strdup(target))) {
        free(s);
        return -ENOMEM;
    }
    s->be = al_store_backend_for(target);
    s->max_conns = s->be->pool_max < 1 ? 1 : s->be->pool_max > AL_STORE_POOL_MAX ? AL_STORE_POOL_MAX : s->be->pool_max;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->freed, NULL);
    /* the first connection now (a store that cannot be reached is an
     * error at open); the others when the threads need them */
    void *conn = NULL;
    int r = s->be->open(target, &conn, err);
    if (r == 0) {
        s->conns[0] = (al_store_conn){ .conn = conn, .session = s->be->session ? s->be->session(conn) : 0 };
        s->n_conns = 1;
        if (!create && !made_by_airlock(s))
            r = al_err(err, "store", ENOENT, "no airlock store in %s (only `airlock admin bootstrap` or `airlock serve` "
                                            "creates one: is --store right?)", is_postgresql(target) ? "that database" : target);
        else
            r = migrate(s, err);
    }
    if (r < 0) {
        al_store_close(s);
        return r;
    }
    *ret = s;
    return 0;
}

int al_store_open(const char *target, al_store **ret, al_error *err) { return open_store(target, true, ret, err); }

int al_store_open_existing(const char *target, al_store **ret, al_error *err) {
    return open_store(target, false, ret, err);
}

void al_store_close(al_store *s) {
    if (!s)
        return;
    for (int i = 0; i < s->n_conns; i++)
        s->be->close(s->conns[i].conn);
    pthread_cond_destroy(&s->freed);
    pthread_mutex_destroy(&s->mu);
    free(s->target);
    free(s);
}

json_t *al_store_query(al_store *s, al_error *err, const char *sql, const char *fmt, ...) {
    uint64_t t0 = mono_ns();
    al_store_conn *c = al_store_take(s);
    va_list ap;
    va_start(ap, fmt);
    json_t *rows = s->be->query(c->conn, c->depth > 0, err, sql, fmt, ap);
    va_end(ap);
    done(s, c, t0, !rows);
    return rows;
}

int al_store_exec(al_store *s, al_error *err, const char *sql, const char *fmt, ...) {
    uint64_t t0 = mono_ns();
    al_store_conn *c = al_store_take(s);
    va_list ap;
    va_start(ap, fmt);
    int r = s->be->exec(c->conn, c->depth > 0, err, sql, fmt, ap);
    va_end(ap);
    done(s, c, t0, r < 0);
    return r;
}

/* A unit of work holds its connection from begin to commit, so that its
 * statements are one transaction and no other thread's statement lands
 * inside it. One begun inside another is a savepoint of it: its writes
 * land only if the outer one commits, so an operation and the audit event
 * that says it happened can be made one. */
int al_store_begin(al_store *s, al_error *err) {
    uint64_t t0 = mono_ns();
    al_store_conn *c = al_store_take(s);
    int r = s->be->script(c->conn, err, c->depth ? "SAVEPOINT al" : s->be->begin_sql);
    pthread_mutex_lock(&s->mu);
    count(s, c, t0, r < 0);
    if (r == 0) {
        s->stats.units += c->depth == 0;
        c->depth++;
    }
    put_locked(s, c);
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* The end of the calling thread's innermost unit: COMMIT to commit it, or
 * not; false when it holds none. */
static int end_unit(al_store *s, al_error *err, bool commit) {
    uint64_t t0 = mono_ns();
    pthread_mutex_lock(&s->mu);
    al_store_conn *c = held_locked(s);
    /* the connection stays the thread's until the statement that ends its
     * unit is through (busy), though its depth says the unit is over */
    bool outer = c && --c->depth == 0;
    pthread_mutex_unlock(&s->mu);
    if (!c)
        return al_err(err, "store", EINVAL, "no unit of work to end");
    int r = 0;
    if (commit)
        r = s->be->script(c->conn, err, outer ? "COMMIT" : "RELEASE SAVEPOINT al");
    if (!commit || r < 0)
        s->be->script(c->conn, NULL, outer ? "ROLLBACK" : "ROLLBACK TO SAVEPOINT al; RELEASE SAVEPOINT al");
    done(s, c, t0, r < 0);
    return r;
}

int al_store_commit(al_store *s, al_error *err) { return end_unit(s, err, true); }

int al_store_exec_commit(al_store *s, al_error *err, const char *sql, const char *fmt, ...) {
    al_store_conn *c = al_store_held(s);
    if (!c)
        return al_err(err, "store", EINVAL, "no unit of work to commit");
    va_list ap;
    va_start(ap, fmt);
    int r;
    if (c->depth > 1 || !s->be->exec_commit) {
        /* a savepoint's release, or a backend that sends one at a time */
        uint64_t t0 = mono_ns();
        r = s->be->exec(c->conn, true, err, sql, fmt, ap);
        done(s, c, t0, r < 0);
        va_end(ap);
        if (r < 0) {
            al_store_rollback(s);
            return r;
        }
        int cr = al_store_commit(s, err);
        return cr < 0 ? cr : r;
    }
    uint64_t t0 = mono_ns();
    pthread_mutex_lock(&s->mu);
    c->depth--; /* 0: it is given back when the exchange is through */
    pthread_mutex_unlock(&s->mu);
    r = s->be->exec_commit(c->conn, err, sql, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&s->mu);
    s->stats.statements++; /* the COMMIT that went with it */
    count(s, c, t0, r < 0);
    put_locked(s, c);
    pthread_mutex_unlock(&s->mu);
    return r;
}

void al_store_rollback(al_store *s) { end_unit(s, NULL, false); }

int al_store_lock(al_store *s, al_error *err, const char *key) {
    al_store_conn *c = al_store_held(s);
    if (!c)
        return al_err(err, "store", EINVAL, "lock %s outside a unit of work", key);
    uint64_t t0 = mono_ns();
    int r = s->be->lock(c->conn, err, key);
    done(s, c, t0, r < 0);
    return r;
}

bool al_store_own_session(al_store *s, int session) {
    if (session == 0)
        return false;
    pthread_mutex_lock(&s->mu);
    bool own = false;
    for (int i = 0; i < s->n_conns && !own; i++)
        own = s->conns[i].session == session;
    pthread_mutex_unlock(&s->mu);
    return own;
}

int al_store_new_id(const char *prefix, char *buf, size_t len) {
    static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";
    unsigned char rnd[20];
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
        return -EIO;
    size_t pl = strlen(prefix);
    if (len < pl + 2 + sizeof rnd)
        return -ENOSPC;
    memcpy(buf, prefix, pl);
    buf[pl] = '_';
    for (size_t i = 0; i < sizeof rnd; i++)
        buf[pl + 1 + i] = alphabet[rnd[i] & 31];
    buf[pl + 1 + sizeof rnd] = '\0';
    return 0;
}

void al_store_now(char *buf, size_t len) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03ldZ", base, ts.tv_nsec / 1000000);
}

bool al_col_text(json_t *row, const char *col, char *buf, size_t len, bool nullable) {
    json_t *v = json_object_get(row, col);
    if (nullable && (!v || json_is_null(v))) {
        buf[0] = '\0';
        return true;
    }
    if (!json_is_string(v) || json_string_length(v) >= len)
        return false;
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return true;
}

int64_t al_store_row_limit(size_t limit) { return limit ? (int64_t)limit : INT64_MAX; }

int al_store_rows_read(json_t *rows, size_t size, al_row_read_fn read, al_rows_drop_fn drop, void **ret,
                       size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    if (!rows)
        return -EIO;
    size_t n = json_array_size(rows);
    char *recs = calloc(n ? n : 1, size);
    int r = recs ? 0 : al_err(err, "store", ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < n; i++)
        r = read(json_array_get(rows, i), recs + i * size, err);
    json_decref(rows);
    if (r < 0) {
        if (drop && recs)
            drop(recs, n);
        else
            free(recs);
        return r;
    }
    *ret = recs;
    *ret_n = n;
    return 0;
}
