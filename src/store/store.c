/* What both backends share: the handle and its one connection's mutex,
 * units of work (a nested one is a savepoint), the numbered migrations,
 * ids and times. See backend.h. */
#include <errno.h>
#include <stdio.h>
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

const al_store_backend *al_store_backend_for(const char *target) {
    return is_postgresql(target) ? &al_store_postgresql : &al_store_sqlite;
}

const char *al_store_backend_name(const al_store *s) { return s->be->name; }

void al_store_get_stats(al_store *s, al_store_stats *ret) {
    pthread_mutex_lock(&s->mu);
    *ret = s->stats;
    pthread_mutex_unlock(&s->mu);
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Under MU: count one statement that began at T0 (mono_ns). */
static void count(al_store *s, uint64_t t0, bool failed) {
    s->stats.statements++;
    s->stats.failures += failed;
    s->stats.busy_ns += mono_ns() - t0;
}

/* Apply the migrations this database lacks, in order, as one unit of work
 * under the "migrations" lock: nodes that start together on one database
 * apply each exactly once. */
static int migrate(al_store *s, al_error *err) {
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    if ((r = al_store_lock(s, err, "migrations")) < 0 ||
        (r = s->be->script(s->conn, err,
                           "CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")) < 0)
        goto fail;
    for (size_t i = 0; i < s->be->n_migrations; i++) {
        const al_migration *m = &s->be->migrations[i];
        json_t *done = al_store_query(s, err, "SELECT version FROM schema_migrations WHERE version = ?", "s", m->name);
        if (!done) {
            r = -EIO;
            goto fail;
        }
        size_t n = json_array_size(done);
        json_decref(done);
        if (n)
            continue;
        char now[40];
        al_store_now(now, sizeof now);
        if ((r = s->be->script(s->conn, err, m->text)) < 0 ||
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

int al_store_open(const char *target, al_store **ret, al_error *err) {
    al_store *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->be = al_store_backend_for(target);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->mu, &attr);
    pthread_mutexattr_destroy(&attr);
    int r = s->be->open(target, &s->conn, err);
    if (r == 0)
        r = migrate(s, err);
    if (r < 0) {
        al_store_close(s);
        return r;
    }
    *ret = s;
    return 0;
}

void al_store_close(al_store *s) {
    if (!s)
        return;
    if (s->conn)
        s->be->close(s->conn);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

json_t *al_store_query(al_store *s, al_error *err, const char *sql, const char *fmt, ...) {
    uint64_t t0 = mono_ns();
    pthread_mutex_lock(&s->mu);
    va_list ap;
    va_start(ap, fmt);
    json_t *rows = s->be->query(s->conn, s->depth > 0, err, sql, fmt, ap);
    va_end(ap);
    count(s, t0, !rows);
    pthread_mutex_unlock(&s->mu);
    return rows;
}

int al_store_exec(al_store *s, al_error *err, const char *sql, const char *fmt, ...) {
    uint64_t t0 = mono_ns();
    pthread_mutex_lock(&s->mu);
    va_list ap;
    va_start(ap, fmt);
    int r = s->be->exec(s->conn, s->depth > 0, err, sql, fmt, ap);
    va_end(ap);
    count(s, t0, r < 0);
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* A unit of work holds the (recursive) mutex from begin to commit, so no
 * other thread's statement lands inside it. One begun inside another is a
 * savepoint of it: its writes land only if the outer one commits, so an
 * operation and the audit event that says it happened can be made one. */
int al_store_begin(al_store *s, al_error *err) {
    uint64_t t0 = mono_ns();
    pthread_mutex_lock(&s->mu);
    int r = s->be->script(s->conn, err, s->depth ? "SAVEPOINT al" : s->be->begin_sql);
    count(s, t0, r < 0);
    s->stats.units += r == 0 && s->depth == 0;
    if (r < 0) {
        pthread_mutex_unlock(&s->mu);
        return r;
    }
    s->depth++;
    return 0;
}

int al_store_commit(al_store *s, al_error *err) {
    uint64_t t0 = mono_ns();
    bool outer = --s->depth == 0;
    int r = s->be->script(s->conn, err, outer ? "COMMIT" : "RELEASE SAVEPOINT al");
    if (r < 0)
        s->be->script(s->conn, NULL, outer ? "ROLLBACK" : "ROLLBACK TO SAVEPOINT al; RELEASE SAVEPOINT al");
    count(s, t0, r < 0);
    pthread_mutex_unlock(&s->mu);
    return r;
}

void al_store_rollback(al_store *s) {
    uint64_t t0 = mono_ns();
    bool outer = --s->depth == 0;
    s->be->script(s->conn, NULL, outer ? "ROLLBACK" : "ROLLBACK TO SAVEPOINT al; RELEASE SAVEPOINT al");
    count(s, t0, false);
    pthread_mutex_unlock(&s->mu);
}

int al_store_lock(al_store *s, al_error *err, const char *key) {
    if (s->depth <= 0)
        return al_err(err, "store", EINVAL, "lock %s outside a unit of work", key);
    uint64_t t0 = mono_ns();
    int r = s->be->lock(s->conn, err, key);
    count(s, t0, r < 0);
    return r;
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
