/*
 * What the store's own files share, and nothing outside src/store may use:
 * SQL. The service asks the store for typed records (store.h and the
 * headers beside it); the statements that read and write them live here,
 * written once in the SQL both backends speak (see docs/architecture.md,
 * "The store"): `?` placeholders, no INSERT OR ..., no json_extract, no
 * SQLite date functions, every GROUP BY naming what it selects.
 */
#pragma once

#include "store.h"

/* Queries: FMT has one letter per parameter: s text, S text or NULL,
 * i int64. Returns the rows as an array of objects (NULL on error). */
json_t *al_store_query(al_store *s, al_error *err, const char *sql, const char *fmt, ...);
/* Run a statement; returns changes >= 0 or -errno. */
int al_store_exec(al_store *s, al_error *err, const char *sql, const char *fmt, ...);
/* The last statement of the calling thread's unit of work, and its commit
 * (on PostgreSQL in one round trip): changes >= 0 when both went through;
 * -errno when either failed, the unit rolled back. */
int al_store_exec_commit(al_store *s, al_error *err, const char *sql, const char *fmt, ...);

/* Inside a transaction, hold the lock named KEY (e.g. "audit:" + a
 * workspace id) until it ends: what a read-then-write step (the next
 * sequence number, the audit chain's head, a balance) takes before its
 * read. SQLite's BEGIN IMMEDIATE already serialises every writer, so there
 * it is free; PostgreSQL takes a transaction-scoped advisory lock, which
 * holds across every node on the database. */
int al_store_lock(al_store *s, al_error *err, const char *key);

/* Reading a row of al_store_query into a record. Column COL of ROW as
 * text into BUF (LEN bytes): false when it is not text or does not fit (a
 * row of another shape is not read as one); NULL (or no such column) reads
 * as "" when NULLABLE, else is false too. */
bool al_col_text(json_t *row, const char *col, char *buf, size_t len, bool nullable);
/* The sha256 of a secret (an API key, a login link's token, a session's
 * cookie) in hex: what the store keeps instead of it. */
void al_store_hash_secret(const char *secret, char hex[65]);
/* Reading the rows of a list into an array of records, written once:
 * READ fills the record REC (zeroed) from ROW, 0 or -errno with ERR
 * said; DROP (NULL when a record owns nothing) frees an array of N
 * records, some of them still zero. */
typedef int (*al_row_read_fn)(json_t *row, void *rec, al_error *err);
typedef void (*al_rows_drop_fn)(void *recs, size_t n);
/* ROWS (al_store_query's answer, taken; NULL is its failure: -EIO) read
 * one by one into a new array of records of SIZE bytes, *RET (never
 * NULL on success, even for none) and *RET_N; on a failure nothing is
 * returned and what was read is dropped. */
int al_store_rows_read(json_t *rows, size_t size, al_row_read_fn read, al_rows_drop_fn drop, void **ret,
                       size_t *ret_n, al_error *err);
/* A list's LIMIT: LIMIT itself, or no limit (0). */
int64_t al_store_row_limit(size_t limit);
