/* The embedded backend: SQLite in WAL mode, one connection (store.c's
 * pool of one serialises it: the service's load is a few writes per run,
 * and SQLite's own locking would serialise the writers anyway). Each statement is
 * prepared once and kept (keyed by its text), so that a run's seventy-odd
 * statements are parsed and planned once per process, not each time. */
#include <errno.h>
#include <sqlite3.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "migrations_sqlite.h"

/* Prepared statements by their text: open addressing, at most CACHE_MAX
 * kept (the store has a bounded set of statements; one past the bound is
 * prepared, used and finalised as before). */
#define CACHE_SLOTS 1024
#define CACHE_MAX 512

typedef struct cached {
    char *sql;
    uint64_t hash;
    sqlite3_stmt *st;
} cached;

typedef struct sq {
    sqlite3 *db;
    uint64_t steps; /* of the statements done since sq_take_steps */
    size_t n_cached;
    cached cache[CACHE_SLOTS];
} sq;

static uint64_t text_hash(const char *s) {
    uint64_t h = 14695981039346656037u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static int db_err(sqlite3 *db, al_error *err, const char *what) {
    return al_err(err, "store", EIO, "%s: %s", what, sqlite3_errmsg(db));
}

static int sq_open(const char *path, void **ret, al_error *err) {
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        int r = al_err(err, "store", EIO, "open %s: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return r;
    }
    sqlite3_busy_timeout(db, 10000);
    /* WAL: readers do not block the writer; synchronous=NORMAL is durable
     * across a process crash, which is what a killed daemon needs. */
    char *msg = NULL;
    int rc;
    /* Turning a new database to WAL takes it exclusively, and SQLite does
     * not wait on its busy handler for that: processes that open one new
     * database together (the daemon and `airlock admin`) take turns. */
    for (int tries = 0; (rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
                                           NULL, NULL, &msg)) == SQLITE_BUSY &&
                        tries < 200;
         tries++) {
        sqlite3_free(msg);
        msg = NULL;
        nanosleep(&(struct timespec){ .tv_nsec = 50 * 1000 * 1000 }, NULL);
    }
    if (rc != SQLITE_OK) {
        int r = al_err(err, "store", EIO, "pragmas: %s", msg);
        sqlite3_free(msg);
        sqlite3_close(db);
        return r;
    }
    sq *q = calloc(1, sizeof *q);
    if (!q) {
        sqlite3_close(db);
        return -ENOMEM;
    }
    q->db = db;
    *ret = q;
    return 0;
}

static void sq_close(void *conn) {
    sq *q = conn;
    for (size_t i = 0; i < CACHE_SLOTS; i++)
        if (q->cache[i].sql) {
            sqlite3_finalize(q->cache[i].st);
            free(q->cache[i].sql);
        }
    sqlite3_close(q->db);
    free(q);
}

static int bind_all(sqlite3_stmt *st, const char *fmt, va_list ap) {
    for (int i = 0; fmt && fmt[i]; i++) {
        int rc;
        if (fmt[i] == 's' || fmt[i] == 'S') {
            const char *v = va_arg(ap, const char *);
            rc = v ? sqlite3_bind_text(st, i + 1, v, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, i + 1);
        } else if (fmt[i] == 'i') {
            rc = sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
        } else {
            return -EINVAL;
        }
        if (rc != SQLITE_OK)
            return -EIO;
    }
    return 0;
}

static json_t *column(sqlite3_stmt *st, int i) {
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        return json_integer(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT:
        return json_real(sqlite3_column_double(st, i));
    case SQLITE_NULL:
        return json_null();
    default: {
        const char *t = (const char *)sqlite3_column_text(st, i);
        json_t *j = json_stringn(t ? t : "", (size_t)sqlite3_column_bytes(st, i));
        return j ? j : json_null();
    }
    }
}

/* SQL's statement, from the cache or prepared now (and kept when there
 * is room); NULL (with ERR) on failure. *RET_KEPT: it is the cache's, to be
 * reset after use, not finalised. */
static sqlite3_stmt *statement(sq *q, al_error *err, const char *sql, bool *ret_kept) {
    uint64_t h = text_hash(sql);
    size_t i = h % CACHE_SLOTS;
    for (; q->cache[i].sql; i = (i + 1) % CACHE_SLOTS)
        if (q->cache[i].hash == h && strcmp(q->cache[i].sql, sql) == 0) {
            *ret_kept = true;
            return q->cache[i].st;
        }
    bool keep = q->n_cached < CACHE_MAX;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v3(q->db, sql, -1, keep ? SQLITE_PREPARE_PERSISTENT : 0, &st, NULL) != SQLITE_OK) {
        db_err(q->db, err, "prepare");
        return NULL;
    }
    char *copy = keep ? strdup(sql) : NULL;
    if (copy) {
        q->cache[i] = (cached){ .sql = copy, .hash = h, .st = st };
        q->n_cached++;
    }
    *ret_kept = copy != NULL;
    return st;
}

/* Done with ST (statement()'s answer): its steps counted, back to the
 * cache unbound, its read of the database ended, or finalised. */
static void done(sq *q, sqlite3_stmt *st, bool kept) {
    q->steps += (uint64_t)sqlite3_stmt_status(st, SQLITE_STMTSTATUS_VM_STEP, 1);
    if (kept) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    } else {
        sqlite3_finalize(st);
    }
}

/* SQL's statement with its parameters bound; NULL (with ERR) on failure. */
static sqlite3_stmt *prepare(sq *q, al_error *err, const char *sql, const char *fmt, va_list ap, bool *ret_kept) {
    sqlite3_stmt *st = statement(q, err, sql, ret_kept);
    if (!st)
        return NULL;
    if (bind_all(st, fmt, ap) < 0) {
        db_err(q->db, err, "bind");
        done(q, st, *ret_kept);
        return NULL;
    }
    return st;
}

/* SQLite undoes a failed statement alone, in or out of a transaction. */
static json_t *sq_query(void *conn, bool in_tx, al_error *err, const char *sql, const char *fmt, va_list ap) {
    (void)in_tx;
    sq *q = conn;
    bool kept;
    sqlite3_stmt *st = prepare(q, err, sql, fmt, ap, &kept);
    if (!st)
        return NULL;
    json_t *rows = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *row = json_object();
        for (int i = 0; i < sqlite3_column_count(st); i++)
            json_object_set_new(row, sqlite3_column_name(st, i), column(st, i));
        json_array_append_new(rows, row);
    }
    if (rc != SQLITE_DONE) {
        db_err(q->db, err, "query");
        json_decref(rows);
        rows = NULL;
    }
    done(q, st, kept);
    return rows;
}

static int sq_exec(void *conn, bool in_tx, al_error *err, const char *sql, const char *fmt, va_list ap) {
    (void)in_tx;
    sq *q = conn;
    bool kept;
    sqlite3_stmt *st = prepare(q, err, sql, fmt, ap, &kept);
    if (!st)
        return -EIO;
    int ret, rc = sqlite3_step(st);
    if (rc == SQLITE_CONSTRAINT)
        ret = al_err(err, "store", EEXIST, "%s", sqlite3_errmsg(q->db));
    else if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        ret = db_err(q->db, err, "exec");
    else
        ret = sqlite3_changes(q->db);
    done(q, st, kept);
    return ret;
}

static int sq_script(void *conn, al_error *err, const char *sql) {
    sq *q = conn;
    if (!strchr(sql, ';')) {
        /* one statement (BEGIN, COMMIT, a savepoint): from the cache too */
        bool kept;
        sqlite3_stmt *st = statement(q, err, sql, &kept);
        if (!st)
            return -EIO;
        int rc = sqlite3_step(st);
        int r = rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : db_err(q->db, err, "statement");
        done(q, st, kept);
        return r;
    }
    char *msg = NULL;
    if (sqlite3_exec(q->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        int r = al_err(err, "store", EIO, "%s", msg ? msg : "failed");
        sqlite3_free(msg);
        return r;
    }
    return 0;
}

static uint64_t sq_take_steps(void *conn) {
    sq *q = conn;
    uint64_t n = q->steps;
    q->steps = 0;
    return n;
}

/* BEGIN IMMEDIATE took the database's one write lock already. */
static int sq_lock(void *conn, al_error *err, const char *key) {
    (void)conn, (void)err, (void)key;
    return 0;
}

const al_store_backend al_store_sqlite = {
    .name = "sqlite",
    .begin_sql = "BEGIN IMMEDIATE",
    .migrations = al_migrations_sqlite,
    .n_migrations = ELEMENTSOF(al_migrations_sqlite),
    .pool_max = 1, /* one writer at a time in any case, and each statement is short */
    .open = sq_open,
    .close = sq_close,
    .query = sq_query,
    .exec = sq_exec,
    .script = sq_script,
    .take_steps = sq_take_steps,
    .lock = sq_lock,
};
