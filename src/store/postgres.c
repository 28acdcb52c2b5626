/* The shared backend: PostgreSQL through libpq, one connection per node
 * (store.c serialises it, as for SQLite). Statements are the ones SQLite
 * runs: `?` becomes `$N` here, and each is prepared once per connection
 * (a named statement, keyed by its text; forgotten when the connection is
 * made again). Nodes that share the database coordinate through it: named
 * locks are transaction-scoped advisory locks, which hold across every
 * connection. */
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
} prepared;

typedef struct pcache {
    size_t n;
    prepared slot[CACHE_SLOTS];
} pcache;

typedef struct pg {
    PGconn *c;
    bool tx_open;  /* a unit of work is open: never reconnect under it */
    pcache *cache; /* this session's named statements (NULL: none yet) */
} pg;

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
    if (PQstatus(p->c) == CONNECTION_OK)
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

/* SQL run with PP: as this session's named statement (prepared now when it
 * is new and there is room), else unnamed. NULL (with ERR) when libpq
 * has no result at all. */
static PGresult *run_params(pg *p, al_error *err, const char *sql, const params *pp) {
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
    if (e && e->n == pp->n && strcmp(e->types, pp->letters) == 0) {
        snprintf(name, sizeof name, "al_%zu", i);
        PGresult *res = PQexecPrepared(p->c, name, pp->n, pp->values, NULL, NULL, 0);
        if (!res)
            conn_err(p, err, "query");
        return res;
    }
    int n = 0;
    char *q = numbered(sql, &n);
    if (!q) {
        al_err(err, "store", ENOMEM, "out of memory");
        return NULL;
    }
    if (n != pp->n) {
        free(q);
        al_err(err, "store", EINVAL, "%d placeholders, %d parameters", n, pp->n);
        return NULL;
    }
    PGresult *res;
    char *copy = !e && p->cache && p->cache->n < CACHE_MAX ? strdup(sql) : NULL;
    if (copy) {
        snprintf(name, sizeof name, "al_%zu", i);
        res = PQprepare(p->c, name, q, pp->n, pp->types);
        if (res && PQresultStatus(res) == PGRES_COMMAND_OK) {
            /* kept whatever becomes of the transaction it was made in: a
             * named statement is the session's, not the transaction's */
            PQclear(res);
            p->cache->slot[i] = (prepared){ .sql = copy, .hash = h, .n = pp->n };
            memcpy(p->cache->slot[i].types, pp->letters, (size_t)pp->n + 1);
            p->cache->n++;
            res = PQexecPrepared(p->c, name, pp->n, pp->values, NULL, NULL, 0);
        } else {
            free(copy); /* the failure is the statement's answer */
        }
    } else {
        res = PQexecParams(p->c, q, pp->n, pp->types, pp->values, NULL, NULL, 0);
    }
    free(q);
    if (!res)
        conn_err(p, err, "query");
    return res;
}

static PGresult *run(pg *p, al_error *err, const char *sql, const char *fmt, va_list ap) {
    params pp;
    if (ensure(p, err) < 0 || bind_all(&pp, err, fmt, ap) < 0)
        return NULL;
    return run_params(p, err, sql, &pp);
}

/* run() with parameters given as text. */
static PGresult *run_texts(pg *p, al_error *err, const char *sql, int n, const char *const *values) {
    params pp = { .n = n };
    for (int i = 0; i < n; i++) {
        pp.values[i] = values[i];
        pp.types[i] = OID_TEXT;
        pp.letters[i] = 's';
    }
    pp.letters[n] = '\0';
    return run_params(p, err, sql, &pp);
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
    PGresult *res = run(p, err, sql, fmt, ap);
    if (!res)
        return NULL;
    json_t *rows = NULL;
    if (PQresultStatus(res) != PGRES_TUPLES_OK && PQresultStatus(res) != PGRES_COMMAND_OK) {
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

static int simple(pg *p, al_error *err, const char *sql) {
    PGresult *res = PQexec(p->c, sql);
    int r = 0;
    if (!res)
        r = conn_err(p, err, sql);
    else if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
        r = result_err(res, err);
    PQclear(res);
    return r;
}

static int pg_exec(void *conn, bool in_tx, al_error *err, const char *sql, const char *fmt, va_list ap) {
    pg *p = conn;
    /* PostgreSQL aborts the whole transaction on a failed statement;
     * SQLite undoes the statement alone, and callers rely on that (an
     * insert that finds its key taken is an answer, not the end of the
     * unit of work): a savepoint around each insert gives them the same.
     * An UPDATE or DELETE that fails is the end of its unit of work on
     * both (no caller goes on after one), and needs none: two round trips
     * fewer. */
    bool guard = in_tx && strncmp(sql + strspn(sql, " \n"), "INSERT", 6) == 0;
    if (guard && simple(p, err, "SAVEPOINT al_stmt") < 0)
        return -EIO;
    PGresult *res = run(p, err, sql, fmt, ap);
    int r;
    if (!res)
        r = -EIO;
    else if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
        r = result_err(res, err);
    else
        r = atoi(PQcmdTuples(res));
    PQclear(res);
    if (guard)
        simple(p, NULL, r < 0 ? "ROLLBACK TO SAVEPOINT al_stmt; RELEASE SAVEPOINT al_stmt" : "RELEASE SAVEPOINT al_stmt");
    return r;
}

static int pg_script(void *conn, al_error *err, const char *sql) {
    pg *p = conn;
    bool begin = strcmp(sql, "BEGIN") == 0, commit = strcmp(sql, "COMMIT") == 0,
         end = commit || strcmp(sql, "ROLLBACK") == 0;
    if (begin && ensure(p, err) < 0)
        return -EIO;
    int r;
    if (commit) {
        /* COMMIT of a transaction a failed statement aborted "succeeds"
         * and rolls back: its tag says which */
        PGresult *res = PQexec(p->c, sql);
        if (!res)
            r = conn_err(p, err, sql);
        else if (PQresultStatus(res) != PGRES_COMMAND_OK)
            r = result_err(res, err);
        else if (strcmp(PQcmdStatus(res), "COMMIT") != 0)
            r = al_err(err, "store", EIO, "the transaction was rolled back: a statement in it failed");
        else
            r = 0;
        PQclear(res);
    } else {
        r = simple(p, err, sql);
    }
    if (begin && r == 0)
        p->tx_open = true;
    if (end)
        p->tx_open = false;
    return r;
}

static int pg_lock(void *conn, al_error *err, const char *key) {
    pg *p = conn;
    const char *values[1] = { key };
    PGresult *res = run_texts(p, err, "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", 1, values);
    int r = !res ? -EIO : PQresultStatus(res) == PGRES_TUPLES_OK ? 0 : result_err(res, err);
    PQclear(res);
    return r;
}

static int pg_notify(void *conn, bool in_tx, al_error *err, const char *channel, const char *payload) {
    (void)in_tx; /* inside a unit of work, PostgreSQL sends it at COMMIT */
    pg *p = conn;
    if (ensure(p, err) < 0)
        return -EIO;
    const char *values[2] = { channel, payload };
    PGresult *res = run_texts(p, err, "SELECT pg_notify(?, ?)", 2, values);
    int r = !res ? -EIO : PQresultStatus(res) == PGRES_TUPLES_OK ? 0 : result_err(res, err);
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
    .script = pg_script,
    .lock = pg_lock,
    .notify = pg_notify,
    .watch_open = pg_watch_open,
    .watch_next = pg_watch_next,
    .watch_close = pg_watch_close,
};
