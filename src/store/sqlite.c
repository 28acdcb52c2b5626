/* The embedded store: SQLite in WAL mode, numbered migrations applied in
 * order at open, one connection serialised by a mutex (the service's load
 * is a few writes per run; SQLite's own locking would serialise it anyway). */
#include <nettle/sha2.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "migrations.h"
#include "internal.h"

struct al_store {
    sqlite3 *db;
    pthread_mutex_t lock;
    int depth; /* open transactions of the thread holding LOCK */
};

static int db_err(al_store *s, al_error *err, const char *what) {
    return al_err(err, "store", EIO, "%s: %s", what, sqlite3_errmsg(s->db));
}

static int migrate(al_store *s, al_error *err) {
    char *msg = NULL;
    if (sqlite3_exec(s->db, "CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at TEXT NOT NULL)",
                     NULL, NULL, &msg) != SQLITE_OK) {
        int r = al_err(err, "store", EIO, "create schema_migrations: %s", msg);
        sqlite3_free(msg);
        return r;
    }
    for (size_t i = 0; i < ELEMENTSOF(al_migrations); i++) {
        json_t *done = al_store_query(s, err, "SELECT version FROM schema_migrations WHERE version = ?", "s",
                                      al_migrations[i].name);
        if (!done)
            return -EIO;
        size_t n = json_array_size(done);
        json_decref(done);
        if (n)
            continue;
        char now[40];
        al_store_now(now, sizeof now);
        if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
            return db_err(s, err, "begin migration");
        if (sqlite3_exec(s->db, al_migrations[i].text, NULL, NULL, &msg) != SQLITE_OK ||
            al_store_exec(s, err, "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)", "ss",
                          al_migrations[i].name, now) < 0) {
            int r = al_err(err, "store", EIO, "migration %s: %s", al_migrations[i].name, msg ? msg : "insert failed");
            sqlite3_free(msg);
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
            return r;
        }
        if (sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
            return db_err(s, err, "commit migration");
    }
    return 0;
}

int al_store_open(const char *path, al_store **ret, al_error *err) {
    al_store *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    /* recursive: a transaction holds the lock while its statements take it */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        int r = al_err(err, "store", EIO, "open %s: %s", path, s->db ? sqlite3_errmsg(s->db) : "out of memory");
        al_store_close(s);
        return r;
    }
    sqlite3_busy_timeout(s->db, 10000);
    /* WAL: readers do not block the writer; synchronous=NORMAL is durable
     * across a process crash, which is what a killed daemon needs. */
    const char *pragmas = "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;";
    char *msg = NULL;
    if (sqlite3_exec(s->db, pragmas, NULL, NULL, &msg) != SQLITE_OK) {
        int r = al_err(err, "store", EIO, "pragmas: %s", msg);
        sqlite3_free(msg);
        al_store_close(s);
        return r;
    }
    int r = migrate(s, err);
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
    sqlite3_close(s->db);
    pthread_mutex_destroy(&s->lock);
    free(s);
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

/* Prepare SQL and bind its parameters; NULL (with ERR) on failure. */
static sqlite3_stmt *prepare(al_store *s, al_error *err, const char *sql, const char *fmt, va_list ap) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        db_err(s, err, "prepare");
        return NULL;
    }
    if (bind_all(st, fmt, ap) < 0) {
        db_err(s, err, "bind");
        sqlite3_finalize(st);
        return NULL;
    }
    return st;
}

json_t *al_store_query(al_store *s, al_error *err, const char *sql, const char *fmt, ...) {
    pthread_mutex_lock(&s->lock);
    json_t *rows = NULL;
    va_list ap;
    va_start(ap, fmt);
    sqlite3_stmt *st = prepare(s, err, sql, fmt, ap);
    va_end(ap);
    if (!st)
        goto out;
    rows = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *row = json_object();
        for (int i = 0; i < sqlite3_column_count(st); i++)
            json_object_set_new(row, sqlite3_column_name(st, i), column(st, i));
        json_array_append_new(rows, row);
    }
    if (rc != SQLITE_DONE) {
        db_err(s, err, "query");
        json_decref(rows);
        rows = NULL;
    }
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->lock);
    return rows;
}

int al_store_exec(al_store *s, al_error *err, const char *sql, const char *fmt, ...) {
    pthread_mutex_lock(&s->lock);
    int ret;
    va_list ap;
    va_start(ap, fmt);
    sqlite3_stmt *st = prepare(s, err, sql, fmt, ap);
    va_end(ap);
    if (!st) {
        ret = -EIO;
        goto out;
    }
    int rc = sqlite3_step(st);
    if (rc == SQLITE_CONSTRAINT)
        ret = al_err(err, "store", EEXIST, "%s", sqlite3_errmsg(s->db));
    else if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        ret = db_err(s, err, "exec");
    else
        ret = sqlite3_changes(s->db);
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->lock);
    return ret;
}

/* A transaction holds the (recursive) mutex from BEGIN to COMMIT, so no
 * other thread's statement lands inside it. One begun inside another is a
 * savepoint of it: its writes land only if the outer one commits, so an
 * operation and the audit event that says it happened can be made one. */
int al_store_begin(al_store *s, al_error *err) {
    pthread_mutex_lock(&s->lock);
    if (sqlite3_exec(s->db, s->depth ? "SAVEPOINT al" : "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        int r = db_err(s, err, "begin");
        pthread_mutex_unlock(&s->lock);
        return r;
    }
    s->depth++;
    return 0;
}

int al_store_commit(al_store *s, al_error *err) {
    int r = 0;
    bool outer = --s->depth == 0;
    if (sqlite3_exec(s->db, outer ? "COMMIT" : "RELEASE al", NULL, NULL, NULL) != SQLITE_OK) {
        r = db_err(s, err, "commit");
        sqlite3_exec(s->db, outer ? "ROLLBACK" : "ROLLBACK TO al; RELEASE al", NULL, NULL, NULL);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

void al_store_rollback(al_store *s) {
    bool outer = --s->depth == 0;
    sqlite3_exec(s->db, outer ? "ROLLBACK" : "ROLLBACK TO al; RELEASE al", NULL, NULL, NULL);
    pthread_mutex_unlock(&s->lock);
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

static void hash_key(const char *key, char hex[65]) {
    struct sha256_ctx c;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    sha256_update(&c, strlen(key), (const uint8_t *)key);
    sha256_digest(&c, sizeof d, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* New organisations start with this many credits (a ledger grant). */
#define INITIAL_CREDITS 1000

int al_store_create_org(al_store *s, const char *name, char *ret_id, al_error *err) {
    char now[40];
    al_store_now(now, sizeof now);
    al_store_new_id("org", ret_id, 40);
    int r = al_store_exec(s, err, "INSERT INTO orgs (id, name, created_at) VALUES (?, ?, ?)", "sss", ret_id, name, now);
    if (r < 0)
        return r;
    return al_store_grant_credits(s, ret_id, INITIAL_CREDITS, err);
}

int al_store_grant_credits(al_store *s, const char *org_id, int64_t amount, al_error *err) {
    char now[40], id[40];
    al_store_now(now, sizeof now);
    al_store_new_id("led", id, sizeof id);
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    r = al_store_exec(s, err, "UPDATE orgs SET credit_balance = credit_balance + ? WHERE id = ? AND credit_balance + ? >= 0",
                      "isi", amount, org_id, amount);
    if (r == 0)
        r = al_err(err, "credits", ENOENT, "no organisation %s, or the balance would go below zero", org_id);
    if (r > 0)
        r = al_store_exec(s, err,
                          "INSERT INTO ledger (id, org_id, kind, amount, balance_after, created_at) "
                          "SELECT ?, id, 'grant', ?, credit_balance, ? FROM orgs WHERE id = ?",
                          "siss", id, amount, now, org_id);
    if (r < 0) {
        al_store_rollback(s);
        return r;
    }
    return al_store_commit(s, err);
}

int al_store_create_workspace(al_store *s, const char *org_id, const char *name, char *ret_id, al_error *err) {
    char now[40];
    al_store_now(now, sizeof now);
    al_store_new_id("ws", ret_id, 40);
    int r = al_store_exec(s, err, "INSERT INTO workspaces (id, org_id, name, created_at) SELECT ?, id, ?, ? FROM orgs WHERE id = ?",
                          "ssss", ret_id, name, now, org_id);
    if (r == 0)
        return al_err(err, "store", ENOENT, "no organisation %s", org_id);
    return r < 0 ? r : 0;
}

int al_store_create_person(al_store *s, const char *ws_id, const char *name, const char *role, char *ret_id,
                           al_error *err) {
    char now[40];
    if (strcmp(role, "admin") != 0 && strcmp(role, "approver") != 0 && strcmp(role, "member") != 0)
        return al_err(err, "store", EINVAL, "role must be admin, approver or member");
    al_store_now(now, sizeof now);
    al_store_new_id("per", ret_id, 40);
    int r = al_store_exec(s, err, "INSERT INTO people (id, org_id, workspace_id, name, role, created_at) "
                                  "SELECT ?, org_id, id, ?, ?, ? FROM workspaces WHERE id = ?",
                          "sssss", ret_id, name, role, now, ws_id);
    if (r == 0)
        return al_err(err, "store", ENOENT, "no workspace %s", ws_id);
    return r < 0 ? r : 0;
}

int al_store_create_key(al_store *s, const char *person_id, char *ret_key, char *ret_id, al_error *err) {
    char now[40], secret[48], hex[65], prefix[16];
    al_store_now(now, sizeof now);
    al_store_new_id("key", ret_id, 40);
    /* two random ids back to back: 200 bits from getrandom */
    char a[32], b[32];
    al_store_new_id("x", a, sizeof a);
    al_store_new_id("x", b, sizeof b);
    snprintf(secret, sizeof secret, "al_%s%s", a + 2, b + 2);
    hash_key(secret, hex);
    snprintf(prefix, sizeof prefix, "%.10s", secret);
    int r = al_store_exec(s, err, "INSERT INTO api_keys (id, person_id, hash, prefix, created_at) "
                                  "SELECT ?, id, ?, ?, ? FROM people WHERE id = ?",
                          "sssss", ret_id, hex, prefix, now, person_id);
    if (r == 0)
        return al_err(err, "store", ENOENT, "no person %s", person_id);
    if (r < 0)
        return r;
    snprintf(ret_key, 64, "%s", secret);
    return 0;
}

/* The owner of key KEY_ID (revoked or not) into *RET; -ENOENT when none. */
static int key_owner(al_store *s, const char *key_id, al_principal *ret, bool *ret_revoked, al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT p.org_id, p.workspace_id, p.id AS person_id, p.role, k.revoked_at FROM api_keys k "
                                  "JOIN people p ON p.id = k.person_id WHERE k.id = ?",
                                  "s", key_id);
    if (!rows)
        return -EIO;
    if (json_array_size(rows) != 1) {
        json_decref(rows);
        return al_err(err, "store", ENOENT, "no key %s", key_id);
    }
    json_t *r = json_array_get(rows, 0);
    if (ret) {
        snprintf(ret->org_id, sizeof ret->org_id, "%s", json_string_value(json_object_get(r, "org_id")));
        snprintf(ret->workspace_id, sizeof ret->workspace_id, "%s", json_string_value(json_object_get(r, "workspace_id")));
        snprintf(ret->person_id, sizeof ret->person_id, "%s", json_string_value(json_object_get(r, "person_id")));
        snprintf(ret->role, sizeof ret->role, "%s", json_string_value(json_object_get(r, "role")));
    }
    *ret_revoked = json_is_string(json_object_get(r, "revoked_at"));
    json_decref(rows);
    return 0;
}

int al_store_revoke_key(al_store *s, const char *key_id, al_principal *ret_principal, al_error *err) {
    al_principal p;
    bool revoked = false;
    int r = key_owner(s, key_id, &p, &revoked, err);
    if (r < 0)
        return r;
    char now[40];
    al_store_now(now, sizeof now);
    r = al_store_exec(s, err, "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", "ss", now, key_id);
    if (r == 0)
        return al_err(err, "store", EALREADY, "key %s was revoked already", key_id);
    if (r < 0)
        return r;
    if (ret_principal)
        *ret_principal = p;
    return 0;
}

int al_store_rotate_key(al_store *s, const char *key_id, char *ret_key, char *ret_id, al_principal *ret_principal,
                        al_error *err) {
    al_principal p;
    bool revoked = false;
    int r = key_owner(s, key_id, &p, &revoked, err);
    if (r < 0)
        return r;
    if (revoked)
        return al_err(err, "store", EALREADY, "key %s is revoked: create a new one (key create --person %s)", key_id,
                      p.person_id);
    if ((r = al_store_begin(s, err)) < 0)
        return r;
    r = al_store_create_key(s, p.person_id, ret_key, ret_id, err);
    if (r == 0)
        r = al_store_revoke_key(s, key_id, NULL, err);
    if (r < 0) {
        al_store_rollback(s);
        ret_key[0] = '\0';
        return r;
    }
    if ((r = al_store_commit(s, err)) < 0) {
        ret_key[0] = '\0';
        return r;
    }
    if (ret_principal)
        *ret_principal = p;
    return 0;
}

int al_store_authenticate(al_store *s, const char *key, al_principal *ret, al_error *err) {
    if (!key || strlen(key) > 128)
        return 0;
    char hex[65];
    hash_key(key, hex);
    json_t *rows = al_store_query(s, err,
                                  "SELECT p.org_id, p.workspace_id, p.id AS person_id, p.role FROM api_keys k "
                                  "JOIN people p ON p.id = k.person_id WHERE k.hash = ? AND k.revoked_at IS NULL",
                                  "s", hex);
    if (!rows)
        return -EIO;
    int found = json_array_size(rows) == 1;
    if (found) {
        json_t *r = json_array_get(rows, 0);
        snprintf(ret->org_id, sizeof ret->org_id, "%s", json_string_value(json_object_get(r, "org_id")));
        snprintf(ret->workspace_id, sizeof ret->workspace_id, "%s", json_string_value(json_object_get(r, "workspace_id")));
        snprintf(ret->person_id, sizeof ret->person_id, "%s", json_string_value(json_object_get(r, "person_id")));
        snprintf(ret->role, sizeof ret->role, "%s", json_string_value(json_object_get(r, "role")));
    }
    json_decref(rows);
    return found;
}

int al_store_lock(al_store *s, al_error *err, const char *key) {
    (void)key;
    (void)err;
    /* BEGIN IMMEDIATE took the database's one write lock already */
    return s->depth > 0 ? 0 : -EINVAL;
}
