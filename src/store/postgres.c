/* The shared backend: PostgreSQL through libpq, a few connections per
 * node (store.c's pool; each connection here is one thread's at a time).
 * Statements are the ones SQLite runs: `?` becomes `$N` here, and each is
 * prepared once per connection (a named statement, keyed by its text;
 * forgotten when the connection is made again). Nodes that share the
 * database coordinate through it: named locks are transaction-scoped
 * advisory locks, which hold across every connection. */
#include <errno.h>
#include <poll.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "migrations_postgres.h"

/* The type OIDs of pg_type.h, which libpq does not install. */
enum {
    OID_BOOL = 16,
    OID_INT8 = 20,
    OID_INT2 = 21,
    OID_INT4 = 23,
    OID_TEXT = 25,
    OID_FLOAT4 = 700,
    OID_FLOAT8 = 701,
    OID_NUMERIC = 1700
};

#define MAX_PARAMS 64

/* Named statements of one connection by their text: open addressing, at
 * most CACHE_MAX (one past the bound runs unnamed, as before). */
#define CACHE_SLOTS 1024
#define CACHE_MAX 512

typedef struct prepared {
    char *sql;
    uint64_t hash;
    int n;                       /* parameters */
    char types[MAX_PARAMS + 1];  /* their letters, 's' or 'i' */
    /* UNSENT: not prepared in this session (a PREPARE of it failed); SENT:
     * its PREPARE is in the pipeline now; READY: prepared */
    enum { PREP_UNSENT, PREP_SENT, PREP_READY } state;
} prepared;

typedef struct pcache {
    size_t n;
    prepared slot[CACHE_SLOTS];
} pcache;

/* What a unit of work sends without waiting for its answer, which only
 * says whether it failed: its BEGIN, a nested unit's savepoint, a named
 * lock. They go to the server ahead of the next statement whose answer is
 * wanted, in one round trip with it (libpq's pipeline mode); one that
 * fails is that statement's failure (the transaction is aborted then). */
#define PENDING_MAX 8
typedef enum pending_kind { PEND_BEGIN, PEND_SAVEPOINT, PEND_LOCK } pending_kind;

typedef struct pg {
    PGconn *c;
    bool tx_open;  /* a unit of work is open: never reconnect under it */
    pcache *cache; /* this session's named statements (NULL: none yet) */
    int n_pending;
    struct {
        pending_kind kind;
        char *key; /* PEND_LOCK's */
    } pending[PENDING_MAX];
} pg;

static void drop_pending(pg *p, int from) {
    for (int i = from; i < p->n_pending; i++)
        free(p->pending[i].key);
    if (from < p->n_pending)
        p->n_pending = from;
}

static void forget_prepared(pg *p) {
    if (!p->cache)
        return;
    for (size_t i = 0; i < CACHE_SLOTS; i++)
        free(p->cache->slot[i].sql);
    free(p->cache);
    p->cache = NULL;
}

static void no_notices(void *arg, const char *message) {
    /* library code never logs: CREATE TABLE IF NOT EXISTS and friends
     * speak NOTICEs that would go to the daemon's stderr */
    (void)arg, (void)message;
}

static int conn_err(pg *p, al_error *err, const char *what) {
    const char *m = PQerrorMessage(p->c);
    size_t n = strlen(m);
    while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
        n--;
    return al_err(err, "store", EIO, "%s: %.*s", what, (int)n, m);
}

static int session_setup(pg *p, al_error *err) {
    /* A node that hangs or dies in a transaction must not hold the locks
     * every other node waits on: bounded statements, bounded idle. */
    /* a lock waited for longer than lock_timeout fails the statement (its
     * unit of work is retried or refused): a stalled holder does not stall
     * every node behind it */
    PGresult *res = PQexec(p->c, "SET statement_timeout = '30s'; SET lock_timeout = '5s'; "
                                 "SET idle_in_transaction_session_timeout = '10s'; SET client_min_messages = warning");
    int r = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : conn_err(p, err, "session settings");
    PQclear(res);
    return r;
}

/* After the server went away (a restart, a failover), the next statement
 * outside a unit of work reconnects; one inside fails with it. */
static int ensure(pg *p, al_error *err) {
    /* A connection that waited in the pool while the server went away (a
     * restart) has the server's goodbye to read: read now, it reconnects
     * below rather than fail the statement it was about to send. */
    for (int i = 0; i < 2 && !p->tx_open && PQstatus(p->c) == CONNECTION_OK; i++) {
        struct pollfd pfd = { .fd = PQsocket(p->c), .events = POLLIN };
        if (poll(&pfd, 1, 0) <= 0 || !PQconsumeInput(p->c))
            break;
    }
    /* (a connection left in pipeline mode, its answers not all read, is
     * as good as lost: made again too) */
    if (PQstatus(p->c) == CONNECTION_OK && PQpipelineStatus(p->c) == PQ_PIPELINE_OFF)
        return 0;
    if (p->tx_open)
        return al_err(err, "store", EIO, "the connection to PostgreSQL was lost in a transaction");
    /* a new session: the old one's named statements are gone with it */
    forget_prepared(p);
    PQreset(p->c);
    if (PQstatus(p->c) != CONNECTION_OK)
        return conn_err(p, err, "reconnect to PostgreSQL");
    return session_setup(p, err);
}

/* Lists come back in the order SQLite gives them: byte order, which is
 * PostgreSQL's collation C. A database made with a linguistic collation
 * would order paths, names and ids otherwise (and differently per host's
 * libc): refused, with how to make one that is right. */
static int check_collation(pg *p, al_error *err) {
    PGresult *res = PQexec(p->c, "SELECT datcollate FROM pg_database WHERE datname = current_database()");
    int r = 0;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        r = conn_err(p, err, "read the database's collation");
    } else {
        const char *c = PQgetvalue(res, 0, 0);
        if (strcmp(c, "C") != 0 && strcmp(c, "POSIX") != 0 && strncmp(c, "C.", 2) != 0)
            r = al_err(err, "store", EINVAL,
                       "the database's collation is %s: airlock needs C (byte order, as SQLite's): "
                       "CREATE DATABASE ... TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'",
                       c);
    }
    PQclear(res);
    return r;
}

static int pg_open(const char *target, void **ret, al_error *err) {
    pg *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->c = PQconnectdb(target);
    if (!p->c) {
        free(p);
        return al_err(err, "store", ENOMEM, "connect to PostgreSQL: out of memory");
    }
    PQsetNoticeProcessor(p->c, no_notices, NULL);
    int r = PQstatus(p->c) == CONNECTION_OK ? session_setup(p, err) : conn_err(p, err, "connect to PostgreSQL");
    if (r == 0)
        r = check_collation(p, err);
    if (r < 0) {
        PQfinish(p->c);
        free(p);
        return r;
    }
    *ret = p;
    return 0;
}

static int pg_session(void *conn) {
    pg *p = conn;
    return PQstatus(p->c) == CONNECTION_OK ? PQbackendPID(p->c) : 0;
}

static void pg_close(void *conn) {
    pg *p = conn;
    drop_pending(p, 0);
    forget_prepared(p);
    PQfinish(p->c);
    free(p);
}

/* SQL with `?` into SQL with `$1`..`$N`; quoted text and names kept. */
static char *numbered(const char *sql, int *ret_n) {
    size_t len = strlen(sql);
    char *out = malloc(len * 4 + 1);
    if (!out)
        return NULL;
    char *o = out, quote = 0;
    int n = 0;
    for (const char *c = sql; *c; c++) {
        if (quote) {
            if (*c == quote)
                quote = 0;
        } else if (*c == '\'' || *c == '"') {
            quote = *c;
        } else if (*c == '?') {
            o += sprintf(o, "$%d", ++n);
            continue;
        }
        *o++ = *c;
    }
    *o = '\0';
    *ret_n = n;
    return out;
}

/* The parameters of FMT (libpq's text format) with their types, int8 and
 * text: typed, so that `? IS NULL` needs no cast (an untyped $1 there is
 * an error), and the store binds each column by its type. */
typedef struct params {
    int n;
    const char *values[MAX_PARAMS];
    Oid types[MAX_PARAMS];
    char letters[MAX_PARAMS + 1]; /* 's' text, 'i' int8: what a named statement was prepared with */
    char ints[MAX_PARAMS][24];
} params;

static int bind_all(params *pp, al_error *err, const char *fmt, va_list ap) {
    pp->n = 0;
    for (int i = 0; fmt && fmt[i]; i++) {
        if (i >= MAX_PARAMS)
            return al_err(err, "store", E2BIG, "more than %d parameters", MAX_PARAMS);
        if (fmt[i] == 's' || fmt[i] == 'S') {
            pp->values[i] = va_arg(ap, const char *);
            pp->types[i] = OID_TEXT;
            pp->letters[i] = 's';
        } else if (fmt[i] == 'i') {
            snprintf(pp->ints[i], sizeof pp->ints[i], "%lld", (long long)va_arg(ap, int64_t));
            pp->values[i] = pp->ints[i];
            pp->types[i] = OID_INT8;
            pp->letters[i] = 'i';
        } else {
            return al_err(err, "store", EINVAL, "parameter letter '%c'", fmt[i]);
        }
        pp->n++;
    }
    pp->letters[pp->n] = '\0';
    return 0;
}

static int result_err(PGresult *res, al_error *err) {
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    /* class 23, integrity constraint violation: SQLITE_CONSTRAINT's
     * meaning, which callers read as "exists already" */
    int e = state && strncmp(state, "23", 2) == 0 ? EEXIST : EIO;
    return al_err(err, "store", e, "%s%s%s", msg ? msg : PQresStatus(PQresultStatus(res)), state ? " SQLSTATE " : "",
                  state ? state : "");
}

static uint64_t text_hash(const char *s) {
    uint64_t h = 14695981039346656037u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

/* ---------------------------------------------------------------- sending */

/* One exchange with the server: the commands sent in a pipeline, then
 * their answers. */
#define BATCH_MAX (2 * PENDING_MAX + 8)
typedef enum cmd_role { CMD_AHEAD, CMD_PREPARE, CMD_MAIN, CMD_GUARD, CMD_COMMIT } cmd_role;

typedef struct batch {
    int n;
    cmd_role role[BATCH_MAX];
    prepared *prep[BATCH_MAX]; /* CMD_PREPARE's cache entry */
    PGresult *res[BATCH_MAX];
    bool send_failed;
} batch;

static void sent(pg *p, batch *b, cmd_role role, prepared *prep, int ok) {
    (void)p;
    if (!ok || b->n >= BATCH_MAX) {
        b->send_failed = true;
        return;
    }
    b->role[b->n] = role;
    b->prep[b->n] = prep;
    b->n++;
}

/* Queue SQL (`?` placeholders) with PP: as this session's named statement
 * (its PREPARE queued ahead of it when it is new and there is room), else
 * unnamed. -errno (ERR) when it cannot be sent at all. */
static int send_sql(pg *p, batch *b, cmd_role role, al_error *err, const char *sql, const params *pp) {
    if (!p->cache)
        p->cache = calloc(1, sizeof *p->cache);
    uint64_t h = text_hash(sql);
    size_t i = h % CACHE_SLOTS;
    prepared *e = NULL;
    for (; p->cache && p->cache->slot[i].sql; i = (i + 1) % CACHE_SLOTS)
        if (p->cache->slot[i].hash == h && strcmp(p->cache->slot[i].sql, sql) == 0) {
            e = &p->cache->slot[i];
            break;
        }
    char name[24];
    snprintf(name, sizeof name, "al_%zu", i);
    bool same_types = e && e->n == pp->n && strcmp(e->types, pp->letters) == 0;
    if (same_types && e->state != PREP_UNSENT) {
        sent(p, b, role, NULL, PQsendQueryPrepared(p->c, name, pp->n, pp->values, NULL, NULL, 0));
        return 0;
    }
    int n = 0;
    char *q = numbered(sql, &n);
    if (!q)
        return al_err(err, "store", ENOMEM, "out of memory");
    if (n != pp->n) {
        free(q);
        return al_err(err, "store", EINVAL, "%d placeholders, %d parameters", n, pp->n);
    }
    if (!e && p->cache && p->cache->n < CACHE_MAX) {
        char *copy = strdup(sql);
        if (copy) {
            e = &p->cache->slot[i];
            *e = (prepared){ .sql = copy, .hash = h, .n = pp->n, .state = PREP_UNSENT };
            memcpy(e->types, pp->letters, (size_t)pp->n + 1);
            p->cache->n++;
            same_types = true;
        }
    }
    if (same_types) {
        /* prepared once: a named statement is the session's, kept whatever
         * becomes of the transaction it was made in */
        e->state = PREP_SENT;
        sent(p, b, CMD_PREPARE, e, PQsendPrepare(p->c, name, q, pp->n, pp->types));
        sent(p, b, role, NULL, PQsendQueryPrepared(p->c, name, pp->n, pp->values, NULL, NULL, 0));
    } else {
        sent(p, b, role, NULL, PQsendQueryParams(p->c, q, pp->n, pp->types, pp->values, NULL, NULL, 0));
    }
    free(q);
    return 0;
}

static void send_text(pg *p, batch *b, cmd_role role, const char *sql) {
    sent(p, b, role, NULL, PQsendQueryParams(p->c, sql, 0, NULL, NULL, NULL, NULL, 0));
}

static const char lock_sql[] = "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))";

static int send_pending(pg *p, batch *b, al_error *err) {
    for (int i = 0; i < p->n_pending; i++) {
        if (p->pending[i].kind == PEND_BEGIN) {
            send_text(p, b, CMD_AHEAD, "BEGIN");
        } else if (p->pending[i].kind == PEND_SAVEPOINT) {
            send_text(p, b, CMD_AHEAD, "SAVEPOINT al");
        } else {
            params pp = { .n = 1, .values = { p->pending[i].key }, .types = { OID_TEXT }, .letters = "s" };
            int r = send_sql(p, b, CMD_AHEAD, err, lock_sql, &pp);
            if (r < 0)
                return r;
        }
    }
    drop_pending(p, 0);
    return 0;
}

/* Send B and read its answers (B->res; NULL for a command the connection
 * broke before). */
static void exchange(pg *p, batch *b) {
    /* what was sent is read back whatever failed to be sent after it: the
     * connection leaves pipeline mode only with nothing in flight */
    bool broken = !PQpipelineSync(p->c);
    for (int i = 0; i < b->n; i++) {
        b->res[i] = broken ? NULL : PQgetResult(p->c);
        if (!b->res[i]) {
            broken = true;
            continue;
        }
        /* each command's answer ends with a NULL */
        PGresult *x;
        while ((x = PQgetResult(p->c)) != NULL) {
            bool sync = PQresultStatus(x) == PGRES_PIPELINE_SYNC;
            PQclear(x);
            if (sync) {
                broken = true; /* fewer answers than commands: not ours to read on */
                break;
            }
        }
    }
    if (!broken) {
        PGresult *x = PQgetResult(p->c); /* the sync */
        PQclear(x);
    }
    PQexitPipelineMode(p->c);
    for (int i = 0; i < b->n; i++)
        if (b->role[i] == CMD_PREPARE)
            b->prep[i]->state = b->res[i] && PQresultStatus(b->res[i]) == PGRES_COMMAND_OK ? PREP_READY : PREP_UNSENT;
}

static bool failed(const PGresult *res) {
    ExecStatusType st = PQresultStatus(res);
    return st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK;
}

/* SQL with PP (GUARD: between a savepoint and its release, so that its
 * failure undoes it alone), the pending commands ahead of it, in one round
 * trip. Its answer, or the first failure before it; NULL (ERR) when libpq
 * gave none. *RET_GUARD_FAILED: SQL itself failed inside its savepoint
 * (the caller rolls back to it). */
static PGresult *run_batch(pg *p, al_error *err, const char *sql, const params *pp, bool guard, bool *ret_guard_failed,
                           PGresult **ret_commit);

static PGresult *run_params(pg *p, al_error *err, const char *sql, const params *pp, bool guard, bool *ret_guard_failed) {
    return run_batch(p, err, sql, pp, guard, ret_guard_failed, NULL);
}

static PGresult *run(pg *p, al_error *err, const char *sql, const char *fmt, va_list ap, bool guard, bool *ret_guard_failed) {
    params pp;
    *ret_guard_failed = false;
    if (ensure(p, err) < 0 || bind_all(&pp, err, fmt, ap) < 0)
        return NULL;
    return run_params(p, err, sql, &pp, guard, ret_guard_failed);
}

/* As run_params; and with RET_COMMIT, the unit's COMMIT sent after SQL:
 * *RET_COMMIT its answer (NULL: none came). */
static PGresult *run_batch(pg *p, al_error *err, const char *sql, const params *pp, bool guard, bool *ret_guard_failed,
                           PGresult **ret_commit) {
    *ret_guard_failed = false;
    if (!PQenterPipelineMode(p->c)) {
        conn_err(p, err, "query");
        return NULL;
    }
    batch b = { 0 };
    int r = send_pending(p, &b, err);
    if (r == 0 && guard)
        send_text(p, &b, CMD_GUARD, "SAVEPOINT al_stmt");
    if (r == 0)
        r = send_sql(p, &b, CMD_MAIN, err, sql, pp);
    if (r == 0 && guard)
        send_text(p, &b, CMD_GUARD, "RELEASE SAVEPOINT al_stmt");
    if (r == 0 && ret_commit)
        send_text(p, &b, CMD_COMMIT, "COMMIT");
    exchange(p, &b);
    if (ret_commit) {
        *ret_commit = NULL;
        for (int i = 0; i < b.n; i++)
            if (b.role[i] == CMD_COMMIT) {
                *ret_commit = b.res[i];
                b.res[i] = NULL;
            }
    }
    /* the first failure up to the statement (the savepoint's release
     * after it aside), else its own answer */
    int main_i = -1;
    for (int i = 0; i < b.n; i++)
        if (b.role[i] == CMD_MAIN)
            main_i = i;
    PGresult *answer = NULL;
    int answer_i = -1, guard_i = -1;
    for (int i = 0; i <= main_i && !answer; i++) {
        if (b.role[i] == CMD_GUARD && guard_i < 0 && b.res[i] && !failed(b.res[i]))
            guard_i = i; /* the savepoint is set */
        if (b.res[i] && failed(b.res[i]) && PQresultStatus(b.res[i]) != PGRES_PIPELINE_ABORTED) {
            answer = b.res[i];
            answer_i = i;
        }
    }
    if (!answer && main_i >= 0) {
        answer = b.res[main_i];
        answer_i = main_i;
    }
    for (int i = 0; i < b.n; i++)
        if (i != answer_i)
            PQclear(b.res[i]);
    if (r < 0 || b.send_failed) {
        PQclear(answer);
        if (r == 0)
            conn_err(p, err, "send");
        return NULL;
    }
    if (!answer)
        conn_err(p, err, "query");
    else if (failed(answer))
        /* it failed inside its savepoint: the caller undoes it alone */
        *ret_guard_failed = guard_i >= 0 && answer_i > guard_i && PQstatus(p->c) == CONNECTION_OK;
    return answer;
}

static json_t *value(PGresult *res, int row, int col) {
    if (PQgetisnull(res, row, col))
        return json_null();
    const char *v = PQgetvalue(res, row, col);
    switch (PQftype(res, col)) {
    case OID_INT2:
    case OID_INT4:
    case OID_INT8:
        return json_integer(strtoll(v, NULL, 10));
    case OID_BOOL:
        return json_integer(v[0] == 't');
    case OID_NUMERIC: {
        /* SUM() of integers is numeric here: an integer when it is one */
        char *end;
        long long x = strtoll(v, &end, 10);
        if (*end == '\0')
            return json_integer(x);
        return json_real(strtod(v, NULL));
    }
    case OID_FLOAT4:
    case OID_FLOAT8:
        return json_real(strtod(v, NULL));
    default: {
        json_t *j = json_stringn(v, (size_t)PQgetlength(res, row, col));
        return j ? j : json_null();
    }
    }
}

static json_t *pg_query(void *conn, bool in_tx, al_error *err, const char *sql, const char *fmt, va_list ap) {
    (void)in_tx;
    pg *p = conn;
    bool guard_failed;
    PGresult *res = run(p, err, sql, fmt, ap, false, &guard_failed);
    if (!res)
        return NULL;
    json_t *rows = NULL;
    if (failed(res)) {
        result_err(res, err);
        goto out;
    }
    rows = json_array();
    for (int i = 0; rows && i < PQntuples(res); i++) {
        json_t *row = json_object();
        for (int c = 0; row && c < PQnfields(res); c++)
            json_object_set_new(row, PQfname(res, c), value(res, i, c));
        json_array_append_new(rows, row);
    }
out:
    PQclear(res);
    return rows;
}

/* Send what is pending, alone (when no statement follows it). */
static int flush(pg *p, al_error *err) {
    if (!p->n_pending)
        return 0;
    if (!PQenterPipelineMode(p->c))
        return conn_err(p, err, "send");
    batch b = { 0 };
    int r = send_pending(p, &b, err);
    exchange(p, &b);
    for (int i = 0; i < b.n; i++) {
        if (r == 0 && !b.res[i])
            r = conn_err(p, err, "send");
        else if (r == 0 && failed(b.res[i]) && PQresultStatus(b.res[i]) != PGRES_PIPELINE_ABORTED)
            r = result_err(b.res[i], err);
        PQclear(b.res[i]);
    }
    return r;
}

/* SQL (no parameters; several statements allowed) in the simple
 * protocol, after whatever is pending. */
static int simple(pg *p, al_error *err, const char *sql) {
    int r = flush(p, err);
    if (r < 0)
        return r;
    PGresult *res = PQexec(p->c, sql);
    if (!res)
        r = conn_err(p, err, sql);
    else if (failed(res))
        r = result_err(res, err);
    PQclear(res);
    return r;
}

static int pg_exec(void *conn, bool in_tx, al_error *err, const char *sql, const char *fmt, va_list ap) {
    pg *p = conn;
    /* PostgreSQL aborts the whole transaction on a failed statement;
     * SQLite undoes the statement alone, and callers rely on that (an
     * insert that finds its key taken is an answer, not the end of the
     * unit of work): a savepoint around each insert gives them the same,
     * sent with it (one round trip). An UPDATE or DELETE that fails is the
     * end of its unit of work on both (no caller goes on after one), and
     * needs none. */
    bool guard = in_tx && strncmp(sql + strspn(sql, " \n"), "INSERT", 6) == 0, guard_failed;
    PGresult *res = run(p, err, sql, fmt, ap, guard, &guard_failed);
    int r;
    if (!res)
        r = -EIO;
    else if (failed(res))
        r = result_err(res, err);
    else
        r = atoi(PQcmdTuples(res));
    PQclear(res);
    if (guard_failed)
        simple(p, NULL, "ROLLBACK TO SAVEPOINT al_stmt; RELEASE SAVEPOINT al_stmt");
    return r;
}

static int pg_script(void *conn, al_error *err, const char *sql);

static int pg_exec_commit(void *conn, al_error *err, const char *sql, const char *fmt, va_list ap) {
    pg *p = conn;
    params pp;
    bool guard_failed;
    PGresult *res = NULL, *commit = NULL;
    /* no savepoint: a failure ends the unit either way */
    if (ensure(p, err) == 0 && bind_all(&pp, err, fmt, ap) == 0)
        res = run_batch(p, err, sql, &pp, false, &guard_failed, &commit);
    int r;
    if (!res)
        r = -EIO;
    else if (failed(res))
        r = result_err(res, err);
    else if (!commit)
        r = conn_err(p, err, "COMMIT");
    else if (PQresultStatus(commit) != PGRES_COMMAND_OK)
        r = result_err(commit, err);
    else if (strcmp(PQcmdStatus(commit), "COMMIT") != 0)
        r = al_err(err, "store", EIO, "the transaction was rolled back: a statement in it failed");
    else
        r = atoi(PQcmdTuples(res));
    /* the statement failed, and the COMMIT behind it never ran: the
     * transaction is still open on the server, aborted */
    bool still_open = res && commit && PQresultStatus(commit) == PGRES_PIPELINE_ABORTED;
    PQclear(res);
    PQclear(commit);
    if (still_open || (!commit && PQstatus(p->c) == CONNECTION_OK))
        pg_script(p, NULL, "ROLLBACK");
    p->tx_open = false;
    return r;
}

/* The last pending savepoint's index, or -1. */
static int pending_savepoint(pg *p) {
    for (int i = p->n_pending - 1; i >= 0; i--)
        if (p->pending[i].kind == PEND_SAVEPOINT)
            return i;
    return -1;
}

static int defer(pg *p, al_error *err, pending_kind kind, const char *key) {
    if (p->n_pending == PENDING_MAX) {
        int r = flush(p, err);
        if (r < 0)
            return r;
    }
    char *k = key ? strdup(key) : NULL;
    if (key && !k)
        return al_err(err, "store", ENOMEM, "out of memory");
    p->pending[p->n_pending].kind = kind;
    p->pending[p->n_pending].key = k;
    p->n_pending++;
    return 0;
}

static int pg_script(void *conn, al_error *err, const char *sql) {
    pg *p = conn;
    if (strcmp(sql, "BEGIN") == 0) {
        /* sent with the unit's first statement */
        if (ensure(p, err) < 0)
            return -EIO;
        drop_pending(p, 0);
        int r = defer(p, err, PEND_BEGIN, NULL);
        p->tx_open = r == 0;
        return r;
    }
    if (strcmp(sql, "SAVEPOINT al") == 0 && p->tx_open)
        return defer(p, err, PEND_SAVEPOINT, NULL);
    if (strcmp(sql, "ROLLBACK") == 0) {
        /* what was not sent needs no undoing; a BEGIN not sent, no ROLLBACK */
        bool begun = !(p->n_pending && p->pending[0].kind == PEND_BEGIN);
        drop_pending(p, 0);
        p->tx_open = false;
        return begun ? simple(p, err, sql) : 0;
    }
    if (strcmp(sql, "ROLLBACK TO SAVEPOINT al; RELEASE SAVEPOINT al") == 0) {
        int sp = pending_savepoint(p);
        if (sp >= 0) {
            drop_pending(p, sp); /* the nested unit never reached the server */
            return 0;
        }
        drop_pending(p, 0); /* locks taken inside it: undone with it */
        return simple(p, err, sql);
    }
    if (strcmp(sql, "RELEASE SAVEPOINT al") == 0) {
        int sp = pending_savepoint(p);
        if (sp >= 0 && sp == p->n_pending - 1) {
            drop_pending(p, sp); /* an empty nested unit */
            return 0;
        }
        return simple(p, err, sql);
    }
    if (strcmp(sql, "COMMIT") == 0) {
        int r = 0;
        if (p->n_pending == 1 && p->pending[0].kind == PEND_BEGIN) {
            drop_pending(p, 0); /* an empty unit: nothing to send */
        } else if ((r = flush(p, err)) == 0) { /* rare: the unit's last was a lock */
            /* COMMIT of a transaction a failed statement aborted "succeeds"
             * and rolls back: its tag says which */
            PGresult *res = PQexec(p->c, sql);
            if (!res)
                r = conn_err(p, err, sql);
            else if (PQresultStatus(res) != PGRES_COMMAND_OK)
                r = result_err(res, err);
            else if (strcmp(PQcmdStatus(res), "COMMIT") != 0)
                r = al_err(err, "store", EIO, "the transaction was rolled back: a statement in it failed");
            PQclear(res);
        }
        p->tx_open = false;
        return r;
    }
    return simple(p, err, sql);
}

static int pg_lock(void *conn, al_error *err, const char *key) {
    /* sent with the unit's next statement: it waits for the lock there */
    return defer(conn, err, PEND_LOCK, key);
}

static int pg_notify(void *conn, bool in_tx, al_error *err, const char *channel, const char *payload) {
    (void)in_tx; /* inside a unit of work, PostgreSQL sends it at COMMIT */
    pg *p = conn;
    if (ensure(p, err) < 0)
        return -EIO;
    params pp = { .n = 2, .values = { channel, payload }, .types = { OID_TEXT, OID_TEXT }, .letters = "ss" };
    bool guard_failed;
    PGresult *res = run_params(p, err, "SELECT pg_notify(?, ?)", &pp, false, &guard_failed);
    int r = !res ? -EIO : failed(res) ? result_err(res, err) : 0;
    PQclear(res);
    return r;
}

/* A watcher: a connection of its own that LISTENs and does nothing else,
 * so a notification is read as soon as it arrives. */
typedef struct pg_watch {
    pg p;
    const char *const *channels;
    bool listening; /* every LISTEN went through on this connection */
} pg_watch;

static int listen_all(pg_watch *w, al_error *err) {
    for (size_t i = 0; w->channels[i]; i++) {
        char sql[96];
        /* the channels are the store's own constants (nodes.h) */
        snprintf(sql, sizeof sql, "LISTEN %s", w->channels[i]);
        if (simple(&w->p, err, sql) < 0) {
            w->listening = false;
            return -EIO;
        }
    }
    w->listening = true;
    return 0;
}

static int pg_watch_open(const char *target, const char *const *channels, void **ret, al_error *err) {
    void *conn = NULL;
    int r = pg_open(target, &conn, err);
    if (r < 0)
        return r;
    pg_watch *w = calloc(1, sizeof *w);
    if (!w) {
        pg_close(conn);
        return -ENOMEM;
    }
    w->p = *(pg *)conn;
    free(conn);
    w->channels = channels;
    if ((r = listen_all(w, err)) < 0) {
        PQfinish(w->p.c);
        free(w);
        return r;
    }
    *ret = w;
    return 0;
}

static int take(pg_watch *w, char *channel, size_t channel_len, char *payload, size_t payload_len, int *ret_sender) {
    PGnotify *n = PQnotifies(w->p.c);
    if (!n)
        return 0;
    *ret_sender = n->be_pid;
    snprintf(channel, channel_len, "%s", n->relname);
    snprintf(payload, payload_len, "%s", n->extra ? n->extra : "");
    PQfreemem(n);
    return 1;
}

static int pg_watch_next(void *wp, int timeout_ms, char *channel, size_t channel_len, char *payload, size_t payload_len,
                         int *ret_sender, al_error *err) {
    pg_watch *w = wp;
    if (PQstatus(w->p.c) != CONNECTION_OK || !w->listening) {
        if (PQstatus(w->p.c) != CONNECTION_OK)
            PQreset(w->p.c);
        if (PQstatus(w->p.c) != CONNECTION_OK || session_setup(&w->p, err) < 0 || listen_all(w, err) < 0) {
            poll(NULL, 0, timeout_ms);
            return conn_err(&w->p, err, "watch: reconnect to PostgreSQL");
        }
        return 2; /* what was sent while it was away is lost */
    }
    int r = take(w, channel, channel_len, payload, payload_len, ret_sender);
    if (r)
        return r;
    struct pollfd pfd = { .fd = PQsocket(w->p.c), .events = POLLIN };
    int n = poll(&pfd, 1, timeout_ms);
    if (n < 0)
        return errno == EINTR ? 0 : al_err(err, "store", errno, "watch: poll: %m");
    if (n == 0)
        return 0;
    if (!PQconsumeInput(w->p.c))
        return conn_err(&w->p, err, "watch");
    return take(w, channel, channel_len, payload, payload_len, ret_sender);
}

static void pg_watch_close(void *wp) {
    pg_watch *w = wp;
    PQfinish(w->p.c);
    free(w);
}

const al_store_backend al_store_postgresql = {
    .name = "postgresql",
    .begin_sql = "BEGIN",
    .migrations = al_migrations_postgres,
    .n_migrations = ELEMENTSOF(al_migrations_postgres),
    /* a handful: a node's threads (requests, runners, the scheduler) make
     * their round trips side by side, each connection with its own
     * session settings; the watcher's LISTEN is on a connection of its own */
    .pool_max = 4,
    .open = pg_open,
    .close = pg_close,
    .session = pg_session,
    .query = pg_query,
    .exec = pg_exec,
    .exec_commit = pg_exec_commit,
    .script = pg_script,
    .lock = pg_lock,
    .notify = pg_notify,
    .watch_open = pg_watch_open,
    .watch_next = pg_watch_next,
    .watch_close = pg_watch_close,
};
