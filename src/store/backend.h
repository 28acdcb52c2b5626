/*
 * The store's two halves (internal to src/store). store.c holds what every
 * backend shares: the handle, the one-connection mutex, units of work and
 * their savepoints, numbered migrations, ids and times. A backend
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
    int (*open)(const char *target, void **ret_conn, al_error *err);
    void (*close)(void *conn);
    /* One statement, parameters bound from AP by FMT (store.h's letters).
     * IN_TX: inside a unit of work, where a failed statement must not undo
     * the ones before it (SQLite's rule; PostgreSQL needs a savepoint). */
    json_t *(*query)(void *conn, bool in_tx, al_error *err, const char *sql, const char *fmt, va_list ap);
    int (*exec)(void *conn, bool in_tx, al_error *err, const char *sql, const char *fmt, va_list ap);
    /* Statements without parameters, e.g. a migration or BEGIN. */
    int (*script)(void *conn, al_error *err, const char *sql);
    /* Inside a unit of work: hold lock KEY until it ends. */
    int (*lock)(void *conn, al_error *err, const char *key);
    /* Notifications to the other nodes (nodes.h); NULL: one node only. */
    int (*notify)(void *conn, bool in_tx, al_error *err, const char *channel, const char *payload);
    int (*watch_open)(const char *target, const char *const *channels, void **ret, al_error *err);
    int (*watch_next)(void *w, int timeout_ms, char *channel, size_t channel_len, char *payload, size_t payload_len,
                      al_error *err);
    void (*watch_close)(void *w);
} al_store_backend;

struct al_store {
    const al_store_backend *be;
    void *conn;
    pthread_mutex_t mu; /* recursive: a unit of work holds it across its statements */
    int depth;          /* open units of work of the thread holding MU */
    al_store_stats stats; /* under MU */
};

/* The backend that TARGET (al_store_locate's answer) names. */
const al_store_backend *al_store_backend_for(const char *target);

extern const al_store_backend al_store_sqlite;
extern const al_store_backend al_store_postgresql;
