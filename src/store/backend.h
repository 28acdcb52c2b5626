/*
 * The store's two halves (internal to src/store). store.c holds what every
 * backend shares: the handle and its pool of connections, units of work
 * and their savepoints, numbered migrations, ids and times. A backend
 * (sqlite.c, postgres.c) holds a connection and speaks its engine: it runs
 * one statement with `?` parameters, runs a parameterless script, and takes
 * a named lock its own way.
 */
#pragma once

#include <pthread.h>
#include <stdarg.h>

#include "internal.h"

typedef struct al_migration {
    const char *name;
    const char *text;
} al_migration;

typedef struct al_store_backend {
    const char *name; /* "sqlite", "postgresql" */
    /* the statement that opens a unit of work ("BEGIN IMMEDIATE": SQLite
     * takes its write lock up front, so two writers never deadlock) */
    const char *begin_sql;
    const al_migration *migrations;
    size_t n_migrations;
    /* The connections a store may open (as its threads need them): SQLite
     * one (its writers are serialised by the file anyway), PostgreSQL a
     * few, so that one thread's round trip does not wait for another's. */
    int pool_max;
    int (*open)(const char *target, void **ret_conn, al_error *err);
    void (*close)(void *conn);
    /* The server's name for CONN's session (PostgreSQL: its backend's pid,
     * which a notification carries), 0 for none. NULL: none ever. */
    int (*session)(void *conn);
    /* One statement, parameters bound from AP by FMT (store.h's letters).
     * IN_TX: inside a unit of work, where a failed statement must not undo
     * the ones before it (SQLite's rule; PostgreSQL needs a savepoint). */
    json_t *(*query)(void *conn, bool in_tx, al_error *err, const char *sql, const char *fmt, va_list ap);
    int (*exec)(void *conn, bool in_tx, al_error *err, const char *sql, const char *fmt, va_list ap);
    /* exec, then COMMIT of the (outermost) unit of work, together; on a
     * failure of either the unit is rolled back. NULL: exec, then script. */
    int (*exec_commit)(void *conn, al_error *err, const char *sql, const char *fmt, va_list ap);
    /* Statements without parameters, e.g. a migration or BEGIN. */
    int (*script)(void *conn, al_error *err, const char *sql);
    /* The engine's own count of the work CONN's statements (a script of
     * several aside) did since the last call (SQLite: its virtual machine's
     * steps, which grow with the rows a plan reads), taken and reset;
     * NULL: the engine tells none. */
    uint64_t (*take_steps)(void *conn);
    /* Inside a unit of work: hold lock KEY until it ends. */
    int (*lock)(void *conn, al_error *err, const char *key);
    /* Notifications to the other nodes (nodes.h); NULL: one node only. */
    int (*notify)(void *conn, bool in_tx, al_error *err, const char *channel, const char *payload);
    int (*watch_open)(const char *target, const char *const *channels, void **ret, al_error *err);
    /* as al_store_watch_next; *RET_SENDER: the session that sent it */
    int (*watch_next)(void *w, int timeout_ms, char *channel, size_t channel_len, char *payload, size_t payload_len,
                      int *ret_sender, al_error *err);
    void (*watch_close)(void *w);
} al_store_backend;

#define AL_STORE_POOL_MAX 8

/* One connection of a store's pool. A thread takes one for a statement,
 * or from al_store_begin to its commit: a unit of work is one connection's
 * transaction, and its named locks are that transaction's. */
typedef struct al_store_conn {
    void *conn;
    bool busy;         /* a thread has it */
    pthread_t owner;   /* which, while busy */
    int depth;         /* open units of work (savepoints within) of its owner */
    int session;       /* be->session's answer as of its last use */
} al_store_conn;

struct al_store {
    const al_store_backend *be;
    char *target;
    pthread_mutex_t mu;   /* guards what follows */
    pthread_cond_t freed; /* a connection went back to the pool */
    al_store_conn conns[AL_STORE_POOL_MAX];
    int n_conns, max_conns;
    bool opening;         /* a thread opens another connection (outside MU) */
    uint64_t grow_after_ns; /* after an open failed: not before then */
    al_store_stats stats;
};

/* The connection the calling thread holds for its unit of work, or NULL. */
al_store_conn *al_store_held(al_store *s);
/* A connection for the calling thread: the one its unit of work holds, or
 * one of the pool (opened now if all are busy and there may be more, else
 * waited for); al_store_put gives it back (not while a unit holds it). */
al_store_conn *al_store_take(al_store *s);
void al_store_put(al_store *s, al_store_conn *c);
/* Whether SESSION (be->session's) is one of S's connections' sessions. */
bool al_store_own_session(al_store *s, int session);

/* The backend that TARGET (al_store_locate's answer) names. */
const al_store_backend *al_store_backend_for(const char *target);

extern const al_store_backend al_store_sqlite;
extern const al_store_backend al_store_postgresql;
