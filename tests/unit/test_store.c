/*
 * The store's functions on one backend: `store-tests TARGET`, TARGET a
 * SQLite file path (or "sqlite" for a fresh temporary one) or a
 * postgresql:// address of an empty database. meson test runs it on SQLite;
 * tests/integration/test_store_backends.py runs it on both, PostgreSQL on a
 * real cluster. Several handles on one database stand for several nodes:
 * each has its own connection, so what must hold across nodes is tested
 * here across connections.
 */
#include <errno.h>
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "store/internal.h"
#include "store/nodes.h"
#include "store/runs.h"
#include "store/approvals.h"
#include "store/audit.h"
#include "store/governance.h"
#include "store/signin.h"
#include "store/packages.h"

static char target[4096];
static char org[40], ws[40], person[40];

static al_store *open_store(void) {
    al_error err = { 0 };
    al_store *s = NULL;
    if (al_store_open(target, &s, &err) < 0) {
        fprintf(stderr, "open %s: %s\n", target, err.msg);
        exit(2);
    }
    return s;
}

static int64_t balance(al_store *s) {
    al_error err = { 0 };
    json_t *rows = al_store_query(s, &err, "SELECT credit_balance FROM orgs WHERE id = ?", "s", org);
    int64_t b = rows ? json_integer_value(json_object_get(json_array_get(rows, 0), "credit_balance")) : -1;
    json_decref(rows);
    return b;
}

static int64_t ledger_sum(al_store *s) {
    al_error err = { 0 };
    json_t *rows = al_store_query(s, &err, "SELECT COALESCE(SUM(amount), 0) AS n FROM ledger WHERE org_id = ?", "s", org);
    int64_t b = rows ? json_integer_value(json_object_get(json_array_get(rows, 0), "n")) : -1;
    json_decref(rows);
    return b;
}

static void test_tenants(al_store *s) {
    al_error err = { 0 };
    CHECK(al_store_create_org(s, "org one", org, &err) == 0);
    CHECK(al_store_create_workspace(s, org, "ws one", ws, &err) == 0);
    CHECK(al_store_create_workspace(s, "org_nosuch", "x", (char[40]){ 0 }, &err) == -ENOENT);
    CHECK(al_store_create_person(s, ws, "ada", "admin", person, &err) == 0);
    CHECK(al_store_create_person(s, ws, "bob", "owner", (char[40]){ 0 }, &err) == -EINVAL);
    CHECK(al_store_create_person(s, "ws_nosuch", "bob", "member", (char[40]){ 0 }, &err) == -ENOENT);
    CHECK(balance(s) == 1000 && ledger_sum(s) == 1000);

    char key[64], key_id[40], key2[64], key2_id[40];
    CHECK(al_store_create_key(s, person, key, key_id, &err) == 0);
    CHECK(strncmp(key, "al_", 3) == 0 && strlen(key) > 40);
    al_principal p;
    CHECK(al_store_authenticate(s, key, &p, &err) == 1);
    CHECK(strcmp(p.org_id, org) == 0 && strcmp(p.workspace_id, ws) == 0 && strcmp(p.person_id, person) == 0 &&
          strcmp(p.role, "admin") == 0);
    CHECK(al_store_authenticate(s, "al_wrong", &p, &err) == 0);
    CHECK(al_store_authenticate(s, NULL, &p, &err) == 0);
    char huge[300];
    memset(huge, 'a', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    CHECK(al_store_authenticate(s, huge, &p, &err) == 0);
    /* rotate: a new key works, the old one is refused; rotating it again is refused */
    CHECK(al_store_rotate_key(s, key_id, key2, key2_id, &p, &err) == 0);
    CHECK(al_store_authenticate(s, key2, &p, &err) == 1);
    CHECK(al_store_authenticate(s, key, &p, &err) == 0);
    CHECK(al_store_rotate_key(s, key_id, key2, (char[40]){ 0 }, NULL, &err) == -EALREADY);
    CHECK(al_store_revoke_key(s, key2_id, &p, &err) == 0 && strcmp(p.person_id, person) == 0);
    CHECK(al_store_revoke_key(s, key2_id, NULL, &err) == -EALREADY);
    CHECK(al_store_revoke_key(s, "key_nosuch", NULL, &err) == -ENOENT);
    CHECK(al_store_authenticate(s, key2, &p, &err) == 0);

    CHECK(al_store_grant_credits(s, org, 500, &err) == 0);
    CHECK(al_store_grant_credits(s, org, -2000, &err) == -ENOENT); /* never below zero */
    CHECK(al_store_grant_credits(s, "org_nosuch", 5, &err) == -ENOENT);
    CHECK(balance(s) == 1500 && ledger_sum(s) == 1500);
}

/* ---- the console's sign-in: links, sessions, named keys */

#define REDEEMERS 4
static char race_token[64];
static int race_result[REDEEMERS];

/* Each a node of its own (a handle, a connection) redeeming one link. */
static void *redeem_one(void *arg) {
    int i = (int)(intptr_t)arg;
    al_store *h = open_store();
    al_error err = { 0 };
    char secret[64];
    al_store_session ses;
    al_principal p;
    race_result[i] = al_store_login_link_redeem(h, race_token, 3600, secret, &ses, &p, &err);
    al_store_close(h);
    return NULL;
}

static void test_signin(al_store *s) {
    al_error err = { 0 };
    char token[64], link_id[40], expires[40], secret[64];
    al_principal p, q;
    al_store_session ses, got;
    CHECK(al_store_login_link_create(s, person, 900, token, link_id, expires, &p, &err) == 0);
    CHECK(strncmp(token, "ll_", 3) == 0 && strlen(token) > 40 && strcmp(p.person_id, person) == 0);
    char none[64];
    CHECK(al_store_login_link_create(s, "per_nosuch", 900, none, link_id, expires, NULL, &err) == -ENOENT);
    err = (al_error){ 0 };
    /* only hashes are stored */
    json_t *rows = al_store_query(s, &err, "SELECT hash FROM login_links WHERE hash = ?", "s", token);
    CHECK(rows && json_array_size(rows) == 0);
    json_decref(rows);
    CHECK(al_store_login_link_redeem(s, token, 3600, secret, &ses, &q, &err) == 0);
    CHECK(strncmp(secret, "cs_", 3) == 0 && strcmp(q.person_id, person) == 0 && strcmp(q.role, "admin") == 0);
    CHECK(strcmp(ses.expires_at, expires) > 0);
    err = (al_error){ 0 };
    CHECK(al_store_login_link_redeem(s, token, 3600, (char[64]){ 0 }, &got, &q, &err) == -EALREADY);
    err = (al_error){ 0 };
    CHECK(al_store_login_link_redeem(s, "ll_nosuch", 3600, (char[64]){ 0 }, &got, &q, &err) == -ENOENT);
    /* well shaped but not held, and the used one with a letter changed or
     * one more: unknown, as is one in upper case */
    char twin[64], upper[64];
    snprintf(twin, sizeof twin, "%.42s%c", token, token[42] == '0' ? '1' : '0');
    snprintf(upper, sizeof upper, "LL_%s", token + 3);
    const char *unknown[] = { "ll_0123456789abcdefghjkmnpqrstvwxyz01234567", twin, upper, "" };
    for (size_t k = 0; k < sizeof unknown / sizeof *unknown; k++) {
        err = (al_error){ 0 };
        CHECK(al_store_login_link_redeem(s, unknown[k], 3600, (char[64]){ 0 }, &got, &q, &err) == -ENOENT);
    }
    char longer[80];
    snprintf(longer, sizeof longer, "%s0", token);
    CHECK(al_store_login_link_redeem(s, longer, 3600, (char[64]){ 0 }, &got, &q, &err) == -ENOENT);
    /* a link past its time */
    char old[64];
    CHECK(al_store_login_link_create(s, person, -5, old, link_id, expires, NULL, &err) == 0);
    err = (al_error){ 0 };
    CHECK(al_store_login_link_redeem(s, old, 3600, (char[64]){ 0 }, &got, &q, &err) == -ETIMEDOUT);
    /* the session authenticates until it is revoked */
    CHECK(al_store_session_authenticate(s, secret, &q, &got, &err) == 1);
    CHECK(strcmp(got.id, ses.id) == 0 && strcmp(q.workspace_id, ws) == 0);
    CHECK(al_store_session_authenticate(s, "cs_wrong", &q, &got, &err) == 0);
    CHECK(al_store_session_authenticate(s, token, &q, &got, &err) == 0);
    rows = al_store_query(s, &err, "SELECT id FROM console_sessions WHERE hash = ?", "s", secret);
    CHECK(rows && json_array_size(rows) == 0);
    json_decref(rows);
    CHECK(al_store_session_revoke(s, ses.id, &err) == 1);
    CHECK(al_store_session_revoke(s, ses.id, &err) == 0);
    CHECK(al_store_session_authenticate(s, secret, &q, &got, &err) == 0);
    /* a session past its time */
    CHECK(al_store_login_link_create(s, person, 900, token, link_id, expires, NULL, &err) == 0);
    CHECK(al_store_login_link_redeem(s, token, -1, secret, &ses, &q, &err) == 0);
    CHECK(al_store_session_authenticate(s, secret, &q, &got, &err) == 0);
    /* one link redeemed by several nodes at once opens one session */
    CHECK(al_store_login_link_create(s, person, 900, race_token, link_id, expires, NULL, &err) == 0);
    pthread_t t[REDEEMERS];
    for (int i = 0; i < REDEEMERS; i++)
        pthread_create(&t[i], NULL, redeem_one, (void *)(intptr_t)i);
    int won = 0, used = 0;
    for (int i = 0; i < REDEEMERS; i++) {
        pthread_join(t[i], NULL);
        won += race_result[i] == 0;
        used += race_result[i] == -EALREADY;
    }
    CHECK(won == 1 && used == REDEEMERS - 1);
    /* the person's card */
    al_store_person_card card;
    CHECK(al_store_person_card_get(s, person, &card, &err) == 0);
    CHECK(strcmp(card.person_name, "ada") == 0 && strcmp(card.workspace_name, "ws one") == 0 &&
          strcmp(card.org_name, "org one") == 0);
    char first[40];
    CHECK(al_store_first_admin(s, first, &err) == 1 && strcmp(first, person) == 0);
    /* named keys: listed without secrets, counted, last use recorded */
    char key[64], key_id[40];
    int64_t before = 0, after = 0;
    CHECK(al_store_keys_active(s, person, &before, &err) == 0);
    CHECK(al_store_create_key_named(s, person, "ci-agent", key, key_id, &err) == 0);
    CHECK(al_store_keys_active(s, person, &after, &err) == 0 && after == before + 1);
    al_store_key k;
    CHECK(al_store_key_get(s, key_id, &k, &err) == 0);
    CHECK(strcmp(k.name, "ci-agent") == 0 && strcmp(k.workspace_id, ws) == 0 && k.last_used_at[0] == '\0' &&
          strncmp(key, k.prefix, strlen(k.prefix)) == 0);
    CHECK(al_store_authenticate(s, key, &p, &err) == 1);
    CHECK(al_store_key_get(s, key_id, &k, &err) == 0 && k.last_used_at[0]);
    al_store_key *list = NULL;
    size_t n = 0;
    CHECK(al_store_keys_list(s, ws, person, 1000, &list, &n, &err) == 0 && n >= 1 && strcmp(list[0].id, key_id) == 0);
    free(list);
    CHECK(al_store_keys_list(s, ws, "per_nosuch", 1000, &list, &n, &err) == 0 && n == 0);
    free(list);
    CHECK(al_store_key_get(s, "key_nosuch", &k, &err) == -ENOENT);
    /* the sweep forgets what ended before its time, and only that */
    char live_token[64], live_secret[64], sweep_before[40];
    CHECK(al_store_login_link_create(s, person, 900, live_token, link_id, expires, NULL, &err) == 0);
    CHECK(al_store_login_link_create(s, person, 900, token, link_id, expires, NULL, &err) == 0);
    CHECK(al_store_login_link_redeem(s, token, 3600, live_secret, &ses, &q, &err) == 0);
    al_store_time_from_now(1, sweep_before);
    CHECK(al_store_signin_sweep(s, sweep_before, &err) > 0);
    CHECK(al_store_session_authenticate(s, live_secret, &q, &got, &err) == 1);
    CHECK(al_store_login_link_redeem(s, live_token, 3600, (char[64]){ 0 }, &got, &q, &err) == 0);
    err = (al_error){ 0 };
    CHECK(al_store_login_link_redeem(s, old, 3600, (char[64]){ 0 }, &got, &q, &err) == -ENOENT);
    CHECK(al_store_session_authenticate(s, secret, &q, &got, &err) == 0);
}

static void test_units_of_work(al_store *s) {
    al_error err = { 0 };
    /* a savepoint rolled back inside a committed unit: its writes alone go */
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_grant_credits(s, org, 7, &err) == 0); /* nested: a savepoint */
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_grant_credits(s, org, 11, &err) == 0);
    al_store_rollback(s);
    CHECK(al_store_commit(s, &err) == 0);
    CHECK(balance(s) == 1507 && ledger_sum(s) == 1507);
    /* a failed statement inside a unit of work undoes itself alone (SQLite's
     * rule; PostgreSQL gets it from a savepoint per write) */
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_grant_credits(s, org, 3, &err) == 0);
    CHECK(al_store_exec(s, &err, "INSERT INTO orgs (id, name, created_at) VALUES (?, 'dup', 'x')", "s", org) == -EEXIST);
    CHECK(al_store_grant_credits(s, org, 5, &err) == 0);
    CHECK(al_store_commit(s, &err) == 0);
    CHECK(balance(s) == 1515 && ledger_sum(s) == 1515);
    /* a whole unit rolled back leaves nothing */
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_grant_credits(s, org, 100, &err) == 0);
    al_store_rollback(s);
    CHECK(balance(s) == 1515);
    /* locks belong to units of work */
    CHECK(al_store_lock(s, &err, "x") == -EINVAL);
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_lock(s, &err, "x") == 0);
    CHECK(al_store_commit(s, &err) == 0);
    /* a malformed statement is an error, not a crash; the handle goes on */
    err = (al_error){ 0 };
    CHECK(al_store_query(s, &err, "SELECT nonsense FROM nowhere", NULL) == NULL && err.err == EIO);
    CHECK(al_store_exec(s, &err, "SELECT ?", "si", "a", (int64_t)1) < 0);
    CHECK(balance(s) == 1515);
}

/* Units of work as PostgreSQL sends them (a BEGIN, a savepoint or a lock
 * goes with the statement after it), and as SQLite runs them: the same. */
static void test_unit_shapes(al_store *s) {
    al_error err = { 0 };
    int64_t b0 = balance(s);
    /* empty units, committed and rolled back */
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_commit(s, &err) == 0);
    CHECK(al_store_begin(s, &err) == 0);
    al_store_rollback(s);
    /* a nested unit that ends before it did anything, either way */
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_begin(s, &err) == 0);
    al_store_rollback(s);
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_lock(s, &err, "shape:a") == 0);
    CHECK(al_store_commit(s, &err) == 0);
    CHECK(al_store_grant_credits(s, org, 2, &err) == 0);
    CHECK(al_store_commit(s, &err) == 0);
    CHECK(balance(s) == b0 + 2);
    /* several locks, then the statement they go with */
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_lock(s, &err, "shape:b") == 0);
    CHECK(al_store_lock(s, &err, "shape:c") == 0);
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_lock(s, &err, "shape:d") == 0);
    CHECK(al_store_grant_credits(s, org, 3, &err) == 0);
    CHECK(al_store_commit(s, &err) == 0);
    CHECK(al_store_commit(s, &err) == 0);
    CHECK(balance(s) == b0 + 5);
    /* an insert that cannot even be prepared fails alone, like one whose
     * key is taken: the unit goes on */
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_exec(s, &err, "INSERT INTO nowhere (x) VALUES (?)", "s", "y") < 0);
    CHECK(al_store_grant_credits(s, org, 4, &err) == 0);
    CHECK(al_store_commit(s, &err) == 0);
    CHECK(balance(s) == b0 + 9 && ledger_sum(s) == balance(s));
    /* a unit's last statement with its commit: both land, or neither */
    int64_t b1 = balance(s);
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_grant_credits(s, org, 5, &err) == 0);
    CHECK(al_store_exec_commit(s, &err, "UPDATE orgs SET credit_balance = credit_balance + 1 WHERE id = ?", "s", org) == 1);
    CHECK(balance(s) == b1 + 6);
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_grant_credits(s, org, 5, &err) == 0);
    CHECK(al_store_exec_commit(s, &err, "INSERT INTO orgs (id, name, created_at) VALUES (?, 'dup', 'x')", "s", org) ==
          -EEXIST);
    CHECK(balance(s) == b1 + 6); /* the grant went with it */
    CHECK(al_store_exec_commit(s, &err, "SELECT 1", NULL) == -EINVAL); /* no unit */
    /* nested: the savepoint's statement and its release; the outer unit decides */
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_exec_commit(s, &err, "UPDATE orgs SET credit_balance = credit_balance - 7 WHERE id = ?", "s", org) == 1);
    CHECK(al_store_exec_commit(s, &err, "UPDATE orgs SET credit_balance = credit_balance + 6 WHERE id = ?", "s", org) == 1);
    CHECK(balance(s) == b1 + 5 && ledger_sum(s) == balance(s));
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_exec_commit(s, &err, "UPDATE orgs SET credit_balance = credit_balance - 7 WHERE id = ?", "s", org) == 1);
    al_store_rollback(s);
    CHECK(balance(s) == b1 + 5);
    /* a unit's lock is seen by another connection's unit */
    al_store *other = open_store();
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_lock(s, &err, "shape:held") == 0);
    CHECK(al_store_grant_credits(s, org, 1, &err) == 0);
    CHECK(al_store_commit(s, &err) == 0);
    CHECK(al_store_begin(other, &err) == 0);
    CHECK(al_store_lock(other, &err, "shape:held") == 0);
    CHECK(al_store_grant_credits(other, org, 1, &err) == 0);
    CHECK(al_store_commit(other, &err) == 0);
    al_store_close(other);
    CHECK(balance(s) == b0 + 16);
}

#define POOL_THREADS 3
typedef struct pool_arg {
    al_store *s;
    int done;
} pool_arg;

static void *pool_reader(void *p) {
    pool_arg *a = p;
    al_error err = { 0 };
    json_t *rows = al_store_query(a->s, &err, "SELECT 1 AS one", NULL);
    __atomic_store_n(&a->done, rows ? 1 : -1, __ATOMIC_SEQ_CST);
    json_decref(rows);
    return NULL;
}

/* PostgreSQL: a pool of connections. A unit of work holds one of them
 * (others' statements go on meanwhile); a connection the server ended
 * while it waited in the pool is made again before its next statement; one
 * ended under a unit fails that unit alone. */
static void test_pool(al_store *s, bool postgresql) {
    if (!postgresql)
        return;
    al_error err = { 0 };
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_lock(s, &err, "pool:held") == 0);
    pthread_t t[POOL_THREADS];
    pool_arg args[POOL_THREADS];
    for (int i = 0; i < POOL_THREADS; i++) {
        args[i] = (pool_arg){ .s = s };
        pthread_create(&t[i], NULL, pool_reader, &args[i]);
    }
    for (int i = 0; i < POOL_THREADS; i++)
        pthread_join(t[i], NULL);
    /* they read while the unit was open */
    for (int i = 0; i < POOL_THREADS; i++)
        CHECK(args[i].done == 1);
    CHECK(al_store_commit(s, &err) == 0);

    /* the server ends an idle connection: the next statement makes it again */
    al_store *killer = open_store();
    json_t *rows = al_store_query(s, &err, "SELECT pg_backend_pid() AS pid", NULL);
    int64_t pid = json_integer_value(json_object_get(json_array_get(rows, 0), "pid"));
    json_decref(rows);
    CHECK(pid > 0);
    rows = al_store_query(killer, &err, "SELECT pg_terminate_backend(CAST(? AS INTEGER)) AS ok", "i", pid);
    CHECK(rows && json_integer_value(json_object_get(json_array_get(rows, 0), "ok")) == 1);
    json_decref(rows);
    usleep(200 * 1000);
    for (int i = 0; i < POOL_THREADS + 1; i++) {
        rows = al_store_query(s, &err, "SELECT pg_backend_pid() AS pid", NULL);
        CHECK(rows != NULL && json_integer_value(json_object_get(json_array_get(rows, 0), "pid")) != pid);
        json_decref(rows);
    }

    /* ended under a unit of work: that unit fails, the next works */
    int64_t b0 = balance(s);
    CHECK(al_store_begin(s, &err) == 0);
    rows = al_store_query(s, &err, "SELECT pg_backend_pid() AS pid", NULL);
    pid = json_integer_value(json_object_get(json_array_get(rows, 0), "pid"));
    json_decref(rows);
    rows = al_store_query(killer, &err, "SELECT pg_terminate_backend(CAST(? AS INTEGER)) AS ok", "i", pid);
    CHECK(rows && json_integer_value(json_object_get(json_array_get(rows, 0), "ok")) == 1);
    json_decref(rows);
    usleep(200 * 1000);
    err = (al_error){ 0 };
    CHECK(al_store_grant_credits(s, org, 1, &err) < 0);
    al_store_rollback(s);
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_grant_credits(s, org, 1, &err) == 0);
    CHECK(al_store_commit(s, &err) == 0);
    CHECK(balance(s) == b0 + 1);
    al_store_close(killer);
}

static void test_idempotency(al_store *s) {
    al_error err = { 0 };
    al_store_idem rec = { .request_hash = "h1", .kind = "run", .resource_id = "run_1" }, got;
    CHECK(al_store_idem_get(s, person, "k", "2026-01-01T00:00:00.000Z", &got, &err) == 0);
    CHECK(al_store_idem_put(s, person, "k", &rec, "2026-01-01T00:00:00.000Z", "2026-01-02T00:00:00.000Z", &err) == 0);
    CHECK(al_store_idem_put(s, person, "k", &rec, "2026-01-01T00:00:01.000Z", "2026-01-02T00:00:00.000Z", &err) == -EEXIST);
    CHECK(al_store_idem_get(s, person, "k", "2026-01-01T00:00:02.000Z", &got, &err) == 1);
    CHECK(strcmp(got.request_hash, "h1") == 0 && strcmp(got.kind, "run") == 0 && strcmp(got.resource_id, "run_1") == 0);
    /* expired: not read, and a new request may take the key */
    CHECK(al_store_idem_get(s, person, "k", "2026-01-03T00:00:00.000Z", &got, &err) == 0);
    rec.resource_id[4] = '2';
    CHECK(al_store_idem_put(s, person, "k", &rec, "2026-01-03T00:00:00.000Z", "2026-01-04T00:00:00.000Z", &err) == 0);
    CHECK(al_store_idem_forget(s, person, "k", "run_1", &err) == 0);
    CHECK(al_store_idem_get(s, person, "k", "2026-01-03T00:00:01.000Z", &got, &err) == 1);
    CHECK(al_store_idem_forget(s, person, "k", "run_2", &err) == 1);
    CHECK(al_store_idem_put(s, person, "a", &rec, "2026-01-01T00:00:00.000Z", "2026-01-02T00:00:00.000Z", &err) == 0);
    CHECK(al_store_idem_put(s, person, "b", &rec, "2026-01-01T00:00:00.000Z", "2026-01-09T00:00:00.000Z", &err) == 0);
    CHECK(al_store_idem_sweep(s, "2026-01-05T00:00:00.000Z", &err) == 1);
}

/* ---- several connections at once: what several nodes do */

#define WRITERS 6
#define GRANTS 40

static void *grant_loop(void *arg) {
    (void)arg;
    al_store *s = open_store();
    al_error err = { 0 };
    for (int i = 0; i < GRANTS; i++) {
        int r = al_store_grant_credits(s, org, (i % 2) ? 3 : -1, &err);
        if (r < 0)
            fprintf(stderr, "grant: %s\n", err.msg);
    }
    al_store_close(s);
    return NULL;
}

static void test_concurrent_credits(al_store *s) {
    int64_t before = balance(s);
    pthread_t t[WRITERS];
    for (int i = 0; i < WRITERS; i++)
        pthread_create(&t[i], NULL, grant_loop, NULL);
    for (int i = 0; i < WRITERS; i++)
        pthread_join(t[i], NULL);
    /* every grant landed once, and the ledger agrees with the balance */
    CHECK(balance(s) == before + WRITERS * (GRANTS / 2) * 2);
    CHECK(ledger_sum(s) == balance(s));
}

static void *open_fresh(void *arg) {
    al_store **ret = arg;
    *ret = open_store();
    return NULL;
}

/* Nodes that start together on one new database migrate it once. */
static void test_concurrent_open(void) {
    al_store *h[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, open_fresh, &h[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    al_error err = { 0 };
    json_t *rows = al_store_query(h[0], &err, "SELECT COUNT(*) AS n FROM schema_migrations", NULL);
    json_t *dup = al_store_query(h[0], &err,
                                 "SELECT version, COUNT(*) AS n FROM schema_migrations GROUP BY version HAVING COUNT(*) > 1",
                                 NULL);
    CHECK(rows && json_integer_value(json_object_get(json_array_get(rows, 0), "n")) > 0);
    CHECK(dup && json_array_size(dup) == 0);
    json_decref(rows);
    json_decref(dup);
    for (int i = 0; i < 4; i++)
        al_store_close(h[i]);
}

static void add_run(al_store *s, const char *id, const char *who, int cap, const char *state, const char *node);

/* ---- runs: states, their moves, the charge and the refund */

static void test_run_states(void) {
    for (int st = 0; st < _AL_RUN_STATE_MAX; st++) {
        const char *name = al_run_state_name((al_run_state)st);
        CHECK(name && al_run_state_from_name(name) == (al_run_state)st);
    }
    CHECK(al_run_state_from_name("Running") == _AL_RUN_STATE_INVALID);
    CHECK(al_run_state_from_name("") == _AL_RUN_STATE_INVALID && al_run_state_from_name(NULL) == _AL_RUN_STATE_INVALID);
    CHECK(!al_run_state_ended(AL_RUN_PENDING_APPROVAL) && !al_run_state_ended(AL_RUN_QUEUED) &&
          !al_run_state_ended(AL_RUN_PROVISIONING) && !al_run_state_ended(AL_RUN_RUNNING));
    CHECK(al_run_state_ended(AL_RUN_SUCCEEDED) && al_run_state_ended(AL_RUN_FAILED) && al_run_state_ended(AL_RUN_TIMED_OUT) &&
          al_run_state_ended(AL_RUN_KILLED) && al_run_state_ended(AL_RUN_CANCELED) && al_run_state_ended(AL_RUN_ERROR) &&
          al_run_state_ended(AL_RUN_DENIED));
}

static void test_run_moves(al_store *s) {
    al_error err = { 0 };
    add_run(s, "run_m1", "per_m", 3, "queued", NULL);
    al_store_run *r = NULL;
    CHECK(al_store_run_get(s, "run_m1", NULL, &r, &err) == 0 && r->state == AL_RUN_QUEUED && r->cap == 3 && !r->node_id[0]);
    al_store_run_free(r);
    CHECK(al_store_run_get(s, "run_m1", "ws_other", &r, &err) == -ENOENT);
    CHECK(al_store_run_get(s, "run_nosuch", NULL, &r, &err) == -ENOENT);
    /* only from the states named */
    CHECK(al_store_run_move(s, "run_m1", AL_RUN_RUNNING, AL_RUN_SUCCEEDED, &err) == 0);
    CHECK(al_store_exec(s, &err, "UPDATE runs SET price = 7 WHERE id = 'run_m1'", NULL) == 1);
    int64_t before = balance(s);
    /* the charge moves it to provisioning once; a second finds it moved */
    /* only by the node that holds its claim */
    CHECK(al_store_run_charge(s, "run_m1", "node_b", "2026-01-01T00:00:01.000Z", &err) == 0);
    CHECK(al_store_exec(s, &err, "UPDATE runs SET node_id = 'node_b' WHERE id = 'run_m1'", NULL) == 1);
    CHECK(al_store_run_charge(s, "run_m1", "node_x", "2026-01-01T00:00:01.000Z", &err) == 0);
    CHECK(al_store_run_charge(s, "run_m1", "node_b", "2026-01-01T00:00:01.000Z", &err) == 1);
    CHECK(al_store_run_charge(s, "run_m1", "node_b", "2026-01-01T00:00:02.000Z", &err) == 0);
    CHECK(balance(s) == before - 7 && ledger_sum(s) == balance(s));
    CHECK(al_store_run_move(s, "run_m1", AL_RUN_PROVISIONING, AL_RUN_RUNNING, &err) == 1);
    /* a cancel asked of the node that runs it */
    CHECK(al_store_run_cancel_requested(s, "run_m1", &err) == 0);
    CHECK(al_store_run_cancel_request(s, "run_m1", &err) == 1 && al_store_run_cancel_requested(s, "run_m1", &err) == 1);
    /* lost: ended once from active, refunded once */
    unsigned active = AL_RUN_BIT(AL_RUN_PROVISIONING) | AL_RUN_BIT(AL_RUN_RUNNING);
    CHECK(al_store_run_end(s, "run_m1", active, AL_RUN_ERROR, "lost", "gone", "2026-01-01T00:00:03.000Z", &err) == 1);
    CHECK(al_store_run_end(s, "run_m1", active, AL_RUN_ERROR, "lost", "gone", "2026-01-01T00:00:04.000Z", &err) == 0);
    CHECK(al_store_run_refund(s, "run_m1", "2026-01-01T00:00:05.000Z", &err) == 1);
    CHECK(al_store_run_refund(s, "run_m1", "2026-01-01T00:00:06.000Z", &err) == 0);
    CHECK(balance(s) == before && ledger_sum(s) == balance(s));
    /* the end a node thought dead would write does not land on an ended run */
    al_store_run fin = { .state = AL_RUN_SUCCEEDED };
    snprintf(fin.id, sizeof fin.id, "run_m1");
    snprintf(fin.finished_at, sizeof fin.finished_at, "2026-01-01T00:00:07.000Z");
    CHECK(al_store_run_finish(s, &fin, &err) == 0);
    al_run_state st;
    CHECK(al_store_run_state(s, "run_m1", &st, &err) == 0 && st == AL_RUN_ERROR);
    /* a charge the balance cannot cover leaves the run queued, uncharged */
    add_run(s, "run_m2", "per_m", 3, "queued", NULL);
    CHECK(al_store_exec(s, &err, "UPDATE runs SET price = 1000000, node_id = 'node_b' WHERE id = 'run_m2'", NULL) == 1);
    CHECK(al_store_run_charge(s, "run_m2", "node_b", "2026-01-01T00:00:08.000Z", &err) == -ENOSPC);
    CHECK(al_store_run_state(s, "run_m2", &st, &err) == 0 && st == AL_RUN_QUEUED && balance(s) == before);
    /* admission to the shared queue: its room, then the run is claimable */
    al_store_queue_limits lim = { .node_id = "node_x", .queue_max = 100, .person_id = "per_m", .org_id = org,
                                  .per_person = 1, .per_org = 100 };
    al_store_queue_counts c;
    /* admitted only by the node that holds it */
    CHECK(al_store_queue_admit(s, "run_m2", 2, &lim, &c, &err) == 0);
    lim.node_id = "node_b";
    CHECK(al_store_queue_admit(s, "run_m2", 2, &lim, &c, &err) == 1);
    CHECK(al_store_queue_admit(s, "run_m2", 2, &lim, &c, &err) == 0); /* once: now it is the queue's */
    CHECK(al_store_run_get(s, "run_m2", NULL, &r, &err) == 0 && r->cap == 2 && !r->node_id[0]);
    al_store_run_free(r);
    add_run(s, "run_m3", "per_m", 3, "queued", "node_b");
    CHECK(al_store_queue_admit(s, "run_m3", 2, &lim, &c, &err) == -EDQUOT && c.person == 1);
    lim.person_id = NULL; /* an approver's: the global cap only */
    lim.queue_max = 1;
    CHECK(al_store_queue_admit(s, "run_m3", 2, &lim, &c, &err) == -EAGAIN && c.all == 1);
    lim.queue_max = 2;
    CHECK(al_store_queue_admit(s, "run_m3", 2, &lim, &c, &err) == 1);
    CHECK(al_store_exec(s, &err, "UPDATE runs SET state = 'canceled' WHERE id IN ('run_m2', 'run_m3')", NULL) == 2);
    /* an approved run is held by the approving node until it admits it:
     * no node claims it before */
    add_run(s, "run_m4", "per_m4", 3, "pending_approval", NULL);
    CHECK(al_store_run_approved(s, "run_m4", "node_b", &err) == 1);
    CHECK(al_store_run_approved(s, "run_m4", "node_b", &err) == 0);
    al_store_claim cl;
    CHECK(al_store_claim_run(s, "node_x", &cl, &err) == 0);
    lim.queue_max = 100;
    CHECK(al_store_queue_admit(s, "run_m4", 3, &lim, &c, &err) == 1);
    CHECK(al_store_claim_run(s, "node_x", &cl, &err) == 1 && strcmp(cl.run_id, "run_m4") == 0);
    /* a claim another node took over is not started by the first */
    CHECK(al_store_exec(s, &err, "UPDATE runs SET node_id = 'node_y' WHERE id = 'run_m4'", NULL) == 1);
    CHECK(al_store_run_charge(s, "run_m4", "node_x", "2026-01-01T00:00:09.000Z", &err) == 0);
    CHECK(al_store_run_state(s, "run_m4", &st, &err) == 0 && st == AL_RUN_QUEUED);
    /* the cancels asked of a node's active runs, for the node to find */
    CHECK(al_store_run_charge(s, "run_m4", "node_y", "2026-01-01T00:00:09.000Z", &err) == 1);
    char ids[4][40];
    CHECK(al_store_node_cancels(s, "node_y", ids, 4, &err) == 0);
    CHECK(al_store_run_cancel_request(s, "run_m4", &err) == 1);
    CHECK(al_store_node_cancels(s, "node_y", ids, 4, &err) == 1 && strcmp(ids[0], "run_m4") == 0);
    CHECK(al_store_exec(s, &err, "UPDATE runs SET state = 'canceled' WHERE id = 'run_m4'", NULL) == 1);
    if (strcmp(al_store_backend_name(s), "postgresql") == 0) {
        /* a COMMIT after a failed read is a rollback, and said so */
        CHECK(al_store_begin(s, &err) == 0);
        CHECK(al_store_grant_credits(s, org, 1, &err) == 0);
        CHECK(al_store_query(s, &err, "SELECT nonsense FROM nowhere", NULL) == NULL);
        CHECK(al_store_commit(s, &err) < 0);
        CHECK(balance(s) == before);
    }
}

/* ---- approvals, settings, prices, the ledger, the audit chain */

static void test_approvals(al_store *s) {
    al_error err = { 0 };
    for (int d = 1; d < _AL_DECISION_MAX; d++)
        CHECK(al_approval_decision_from_name(al_approval_decision_name((al_approval_decision)d)) == (al_approval_decision)d);
    CHECK(al_approval_decision_name(AL_DECISION_NONE) == NULL && al_approval_decision_from_name(NULL) == AL_DECISION_NONE);
    CHECK(al_approval_decision_from_name("maybe") == _AL_DECISION_INVALID);
    al_store_approval a = { .card = "{\"code\":\"print(1)\"}" }, got;
    snprintf(a.id, sizeof a.id, "apr_1");
    snprintf(a.run_id, sizeof a.run_id, "run_a1");
    snprintf(a.org_id, sizeof a.org_id, "%s", org);
    snprintf(a.workspace_id, sizeof a.workspace_id, "%s", ws);
    snprintf(a.hash, sizeof a.hash, "%064d", 7);
    snprintf(a.requested_at, sizeof a.requested_at, "2026-01-01T00:00:00.000Z");
    snprintf(a.expires_at, sizeof a.expires_at, "2026-01-01T01:00:00.000Z");
    CHECK(al_store_approval_insert(s, &a, &err) == 0);
    CHECK(al_store_approval_insert(s, &a, &err) == -EEXIST); /* one request a run */
    CHECK(al_store_approval_get(s, "run_nosuch", &got, &err) == -ENOENT);
    CHECK(al_store_approval_get(s, "run_a1", &got, &err) == 0 && got.decision == AL_DECISION_NONE &&
          strcmp(got.card, a.card) == 0 && strcmp(got.hash, a.hash) == 0 && !got.decided_by[0] && !got.reason);
    al_store_approval_done(&got);
    /* past its expiry it cannot be approved; then decided once */
    CHECK(al_store_approval_decide(s, "run_a1", AL_DECISION_APPROVED, person, "2026-01-01T02:00:00.000Z", "", 
                                   "2026-01-01T02:00:00.000Z", &err) == 0);
    CHECK(al_store_approval_decide(s, "run_a1", AL_DECISION_APPROVED, person, "2026-01-01T00:10:00.000Z", "ok",
                                   "2026-01-01T00:10:00.000Z", &err) == 1);
    CHECK(al_store_approval_decide(s, "run_a1", AL_DECISION_DENIED, person, "2026-01-01T00:11:00.000Z", "no", NULL, &err) ==
          0);
    CHECK(al_store_approval_get(s, "run_a1", &got, &err) == 0 && got.decision == AL_DECISION_APPROVED &&
          strcmp(got.decided_by, person) == 0 && got.reason && strcmp(got.reason, "ok") == 0);
    al_store_approval_done(&got);
}

static void test_settings_and_ledger(al_store *s) {
    al_error err = { 0 };
    al_store_settings st;
    CHECK(al_store_settings_get(s, ws, &st, &err) == 0 && !st.has_row && !st.has_price);
    al_store_settings_done(&st);
    CHECK(al_store_settings_put(s, ws, "{\"timeout_s\":30}", "{}", "2026-01-01T00:00:00.000Z", &err) == 0);
    CHECK(al_store_settings_put(s, ws, "{\"timeout_s\":40}", "{\"k\":\"v\"}", "2026-01-01T00:00:01.000Z", &err) == 0);
    CHECK(al_store_price_set(s, ws, 9, &err) == 0);
    CHECK(al_store_price_set(s, "ws_nosuch", 9, &err) == -ENOENT);
    CHECK(al_store_settings_get(s, ws, &st, &err) == 0 && st.has_row && st.has_price && st.price_per_run == 9 &&
          strcmp(st.settings, "{\"timeout_s\":40}") == 0 && strcmp(st.secrets, "{\"k\":\"v\"}") == 0);
    al_store_settings_done(&st);
    int64_t b = -1;
    CHECK(al_store_credit_balance(s, org, &b, &err) == 0 && b == balance(s));
    al_store_ledger_entry *e = NULL;
    size_t n = 0;
    al_store_ledger_filter f = { .org_id = org, .limit = 1000 };
    CHECK(al_store_ledger_list(s, &f, &e, &n, &err) == 0 && n > 0);
    /* newest first, and the balance after the newest is the balance */
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += e[i].amount;
    CHECK(n > 0 && e[0].balance_after == b && sum == b);
    for (size_t i = 1; i < n; i++)
        CHECK(e[i - 1].seq > e[i].seq);
    free(e);
}

/* The seal a test gives: any function of what the store set. */
static int test_seal(al_store_audit_event *ev, void *userdata, al_error *err) {
    (void)userdata, (void)err;
    snprintf(ev->hash, sizeof ev->hash, "%016llx%048d", (unsigned long long)ev->seq * 2654435761u, 0);
    return 0;
}

#define AUDITORS 4
static void *audit_loop(void *arg) {
    (void)arg;
    al_store *s = open_store();
    al_error err = { 0 };
    for (int i = 0; i < 20; i++) {
        al_store_audit_event ev = { .data = "{}" };
        snprintf(ev.workspace_id, sizeof ev.workspace_id, "%s", ws);
        snprintf(ev.org_id, sizeof ev.org_id, "%s", org);
        snprintf(ev.kind, sizeof ev.kind, "test.event");
        snprintf(ev.created_at, sizeof ev.created_at, "2026-01-01T00:00:00.000Z");
        if (al_store_audit_append(s, &ev, test_seal, NULL, &err) < 0)
            fprintf(stderr, "audit append: %s\n", err.msg);
    }
    al_store_close(s);
    return NULL;
}

struct chain_walk {
    int64_t n, last_seq;
    char last_hash[65];
    bool broken, malformed;
};

static int walk(const al_store_audit_event *ev, bool malformed, void *userdata) {
    struct chain_walk *w = userdata;
    w->malformed |= malformed;
    if (ev->seq != w->last_seq + 1 || strcmp(ev->prev_hash, w->last_seq ? w->last_hash : AL_AUDIT_GENESIS) != 0)
        w->broken = true;
    w->last_seq = ev->seq;
    snprintf(w->last_hash, sizeof w->last_hash, "%s", ev->hash);
    w->n++;
    return 0;
}

/* Writers on several connections (nodes) make one unbroken chain. */
static void test_audit_chain(al_store *s) {
    pthread_t t[AUDITORS];
    for (int i = 0; i < AUDITORS; i++)
        pthread_create(&t[i], NULL, audit_loop, NULL);
    for (int i = 0; i < AUDITORS; i++)
        pthread_join(t[i], NULL);
    al_error err = { 0 };
    struct chain_walk w = { 0 };
    CHECK(al_store_audit_chain(s, ws, walk, &w, &err) == 0);
    CHECK(w.n == AUDITORS * 20 && !w.broken && !w.malformed);
    al_store_audit_events l;
    al_store_audit_filter f = { .workspace_id = ws, .kind = "test.event", .before_seq = INT64_MAX, .limit = 5 };
    CHECK(al_store_audit_list(s, &f, &l, &err) == 0 && l.n == 5 && l.v[0].seq == AUDITORS * 20 && l.v[4].seq == AUDITORS * 20 - 4);
    al_store_audit_events_free(&l);
    /* a tampered link is seen */
    CHECK(al_store_exec(s, &err, "UPDATE audit_events SET prev_hash = ? WHERE workspace_id = ? AND seq = 7", "ss",
                        AL_AUDIT_GENESIS, ws) == 1);
    w = (struct chain_walk){ 0 };
    CHECK(al_store_audit_chain(s, ws, walk, &w, &err) == 0 && w.broken);
}

/* ---- nodes: leases, the shared queue, notifications */

static void test_leases(al_store *s) {
    al_error err = { 0 };
    CHECK(al_store_node_join(s, "node_a", "h", 1, "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:10.000Z", &err) == 0);
    CHECK(al_store_node_join(s, "node_b", "h", 2, "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:10.000Z", &err) == 0);
    CHECK(al_store_node_join(s, "node_c", "h", 3, "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:10.000Z", &err) == 0);
    CHECK(al_store_node_join(s, "node_a", "h", 1, "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:10.000Z", &err) == -EEXIST);
    CHECK(al_store_nodes_alive(s, "2026-01-01T00:00:05.000Z", &err) == 3);
    CHECK(al_store_node_renew(s, "node_b", "2026-01-01T00:00:30.000Z", &err) == 1);
    CHECK(al_store_node_leave(s, "node_c", "2026-01-01T00:00:06.000Z", &err) == 0);
    char ids[8][40];
    /* before A's lease ends: nobody is dead */
    CHECK(al_store_nodes_reap(s, "node_b", "2026-01-01T00:00:09.000Z", ids, 8, &err) == 0);
    /* after: A, once, however many reap; C left cleanly and is not dead */
    al_store *other = open_store();
    CHECK(al_store_nodes_reap(s, "node_b", "2026-01-01T00:00:11.000Z", ids, 8, &err) == 1 && strcmp(ids[0], "node_a") == 0);
    CHECK(al_store_nodes_reap(other, "node_x", "2026-01-01T00:00:12.000Z", ids, 8, &err) == 0);
    /* a node declared dead cannot renew back to life */
    CHECK(al_store_node_renew(s, "node_a", "2026-01-01T00:01:00.000Z", &err) == 0);
    CHECK(al_store_nodes_alive(s, "2026-01-01T00:00:12.000Z", &err) == 1);
    /* a node known gone (its process, on this host) is dead at the next reap, lease or not */
    CHECK(al_store_node_join(s, "node_e", "here", 5, "2026-01-01T00:00:00.000Z", "2026-01-01T01:00:00.000Z", &err) == 0);
    int64_t pids[8];
    CHECK(al_store_nodes_on_host(s, "here", "node_b", ids, pids, 8, &err) == 1 && strcmp(ids[0], "node_e") == 0 &&
          pids[0] == 5);
    CHECK(al_store_nodes_on_host(s, "elsewhere", "node_b", ids, pids, 8, &err) == 0);
    CHECK(al_store_nodes_reap(s, "node_b", "2026-01-01T00:00:13.000Z", ids, 8, &err) == 0);
    CHECK(al_store_node_expire(s, "node_e", &err) == 0);
    CHECK(al_store_nodes_reap(s, "node_b", "2026-01-01T00:00:13.000Z", ids, 8, &err) == 1 && strcmp(ids[0], "node_e") == 0);
    /* a node never reaps itself */
    CHECK(al_store_nodes_reap(s, "node_b", "2026-01-01T00:10:00.000Z", ids, 8, &err) == 0);
    al_store_close(other);
}

static void add_run(al_store *s, const char *id, const char *who, int cap, const char *state, const char *node) {
    al_error err = { 0 };
    int r = al_store_exec(s, &err,
                          "INSERT INTO runs (id, org_id, workspace_id, person_id, language, code, limits, state, created_at, "
                          "cap, node_id) VALUES (?, ?, ?, ?, 'python', 'pass', '{}', ?, '2026-01-01T00:00:00.000Z', ?, ?)",
                          "sssssiS", id, org, ws, who, state, (int64_t)cap, node);
    if (r != 1)
        fprintf(stderr, "add_run %s: %s\n", id, err.msg);
}

#define CLAIMERS 4
static char claimed[CLAIMERS][16][40];
static int claimed_n[CLAIMERS];

static void *claim_loop(void *arg) {
    int me = (int)(intptr_t)arg;
    al_store *s = open_store();
    al_error err = { 0 };
    char node[16];
    snprintf(node, sizeof node, "claim_%d", me);
    al_store_claim c;
    while (claimed_n[me] < 16 && al_store_claim_run(s, node, &c, &err) == 1)
        snprintf(claimed[me][claimed_n[me]++], 40, "%s", c.run_id);
    al_store_close(s);
    return NULL;
}

static void test_claims(al_store *s) {
    al_error err = { 0 };
    add_run(s, "run_p1_1", "per_p1", 2, "queued", NULL);
    add_run(s, "run_p1_2", "per_p1", 2, "queued", NULL);
    add_run(s, "run_p1_3", "per_p1", 2, "queued", NULL);
    add_run(s, "run_p2_1", "per_p2", 1, "queued", NULL);
    add_run(s, "run_p2_2", "per_p2", 1, "queued", NULL);
    add_run(s, "run_p3_1", "per_p3", 1, "running", "node_b"); /* p3 is at its cap already */
    add_run(s, "run_p3_2", "per_p3", 1, "queued", NULL);
    CHECK(al_store_queued_count(s, NULL, NULL, NULL, &err) == 6);
    CHECK(al_store_queued_count(s, "per_p1", NULL, NULL, &err) == 3 && al_store_queued_count(s, NULL, org, "run_p1_1", &err) == 5);
    /* fair: the oldest of the person with the fewest active, under caps */
    al_store_claim c;
    CHECK(al_store_claim_run(s, "node_b", &c, &err) == 1 && strcmp(c.run_id, "run_p1_1") == 0 && c.cap == 2 &&
          strcmp(c.person_id, "per_p1") == 0);
    CHECK(al_store_claim_run(s, "node_b", &c, &err) == 1 && strcmp(c.run_id, "run_p2_1") == 0);
    CHECK(al_store_claim_run(s, "node_b", &c, &err) == 1 && strcmp(c.run_id, "run_p1_2") == 0);
    CHECK(al_store_claim_run(s, "node_b", &c, &err) == 0); /* everyone at their cap */
    CHECK(al_store_queued_count(s, NULL, NULL, NULL, &err) == 6);
    /* a node that dies with a claimed, not started run gives it back */
    CHECK(al_store_exec(s, &err, "UPDATE runs SET node_id = 'node_a' WHERE id = 'run_p1_2'", NULL) == 1);
    CHECK(al_store_node_join(s, "node_d", "h", 4, "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z", &err) == 0);
    CHECK(al_store_exec(s, &err, "UPDATE runs SET node_id = 'node_d' WHERE id = 'run_p1_2'", NULL) == 1);
    char ids[8][40];
    CHECK(al_store_nodes_reap(s, "node_b", "2026-01-01T00:00:20.000Z", ids, 8, &err) == 1 && strcmp(ids[0], "node_d") == 0);
    CHECK(al_store_queued_count(s, "per_p1", NULL, NULL, &err) == 3);
    CHECK(al_store_node_runs(s, "node_b", ids, 8, &err) == 1 && strcmp(ids[0], "run_p3_1") == 0);
    /* ends free the caps; then four nodes claim at once: each run once, caps held */
    CHECK(al_store_exec(s, &err, "UPDATE runs SET state = 'succeeded' WHERE node_id IS NOT NULL AND state IN ('queued', 'running')", NULL) == 3);
    for (int i = 0; i < 6; i++) {
        char id[40];
        snprintf(id, sizeof id, "run_q%d", i);
        add_run(s, id, i % 2 ? "per_q1" : "per_q2", 2, "queued", NULL);
    }
    pthread_t t[CLAIMERS];
    for (int i = 0; i < CLAIMERS; i++)
        pthread_create(&t[i], NULL, claim_loop, (void *)(intptr_t)i);
    for (int i = 0; i < CLAIMERS; i++)
        pthread_join(t[i], NULL);
    int total = 0, dup = 0;
    for (int i = 0; i < CLAIMERS; i++)
        for (int j = 0; j < claimed_n[i]; j++) {
            total++;
            for (int k = 0; k < CLAIMERS; k++)
                for (int l = 0; l < claimed_n[k]; l++)
                    dup += (k != i || l != j) && strcmp(claimed[i][j], claimed[k][l]) == 0;
        }
    /* p1 (2 left, cap 2), p2 (1 left, cap 1), p3 (1, cap 1), q1 and q2 (3 each, cap 2) */
    CHECK(total == 2 + 1 + 1 + 2 + 2);
    CHECK(dup == 0);
}

static int64_t run_bytes(al_store *s) {
    al_error err = { 0 };
    json_t *rows = al_store_query(s, &err, "SELECT run_bytes FROM orgs WHERE id = ?", "s", org);
    int64_t b = rows ? json_integer_value(json_object_get(json_array_get(rows, 0), "run_bytes")) : -1;
    json_decref(rows);
    return b;
}

/* Storage's bound and lifecycle (issue 33): what a run holds counts in its
 * organisation's run_bytes from its insert to its expiry; an output event
 * gives up its data and keeps its place; the sweep is claimed by one
 * handle (node) at a time. */
static void test_storage_lifecycle(al_store *s) {
    al_error err = { 0 };
    int64_t before = run_bytes(s);
    char code[1001];
    memset(code, 'x', 1000);
    code[1000] = '\0';
    al_store_run r = { .state = AL_RUN_RUNNING, .code = code, .network = "offline", .limits = "{}", .inputs = "{}" };
    snprintf(r.id, sizeof r.id, "run_life");
    snprintf(r.org_id, sizeof r.org_id, "%s", org);
    snprintf(r.workspace_id, sizeof r.workspace_id, "%s", ws);
    snprintf(r.person_id, sizeof r.person_id, "%s", person);
    snprintf(r.language, sizeof r.language, "python");
    snprintf(r.created_at, sizeof r.created_at, "2026-01-01T00:00:00.000Z");
    CHECK(al_store_run_insert(s, &r, &err) == 0);
    int64_t inserted = run_bytes(s) - before;
    CHECK(inserted >= 1000 && inserted < 1100);
    CHECK(al_store_output_event_append(s, "run_life", "stdout", "{\"data\":\"hello\"}", 0, 5, &err) == 0);
    CHECK(al_store_event_append(s, "run_life", "state", "{\"state\":\"running\"}", &err) == 0);
    al_store_run fin = { .state = AL_RUN_SUCCEEDED, .result = "{\"stdout\":\"hello\"}", .stored_bytes = 7 };
    snprintf(fin.id, sizeof fin.id, "run_life");
    snprintf(fin.finished_at, sizeof fin.finished_at, "2026-01-01T00:00:01.000Z");
    CHECK(al_store_run_finish(s, &fin, &err) == 1);
    CHECK(run_bytes(s) - before == inserted + (int64_t)strlen(fin.result) + 7);
    CHECK(al_store_events_drop_output(s, "run_life", "stdout", &err) == 0);
    al_store_event *ev = NULL;
    size_t n = 0;
    CHECK(al_store_events_after(s, "run_life", 0, 10, &ev, &n, &err) == 0 && n == 2);
    CHECK(n == 2 && ev[0].data[0] == '\0' && ev[0].out_at == 0 && ev[0].out_len == 5);
    CHECK(n == 2 && strcmp(ev[1].type, "state") == 0 && ev[1].data[0] == '{' && ev[1].out_at == -1);
    al_store_events_free(ev, n);
    /* past its retention: code, result and events go, and its bytes */
    char ids[4][40];
    CHECK(al_store_runs_expirable(s, ws, "2026-01-01T00:00:01.000Z", ids, 4, &err) == 0);
    CHECK(al_store_runs_expirable(s, ws, "2026-01-02T00:00:00.000Z", ids, 4, &err) >= 1);
    CHECK(al_store_run_expire(s, "run_life", "2026-01-02T00:00:00.000Z", &err) == 1);
    CHECK(al_store_run_expire(s, "run_life", "2026-01-02T00:00:00.000Z", &err) == 0);
    CHECK(run_bytes(s) == before);
    al_store_run *got = NULL;
    CHECK(al_store_run_get(s, "run_life", NULL, &got, &err) == 0 && got->state == AL_RUN_SUCCEEDED &&
          strcmp(got->expired_at, "2026-01-02T00:00:00.000Z") == 0 && !got->result && got->code && !got->code[0]);
    al_store_run_free(got);
    CHECK(al_store_events_after(s, "run_life", 0, 10, &ev, &n, &err) == 0 && n == 0);
    al_store_events_free(ev, n);
    /* the sweep: due once per time, to the first handle that claims it */
    al_store *other = open_store();
    CHECK(al_store_sweep_claim(s, "runs", "node_a", "2026-01-01T00:00:00.000Z", "2026-01-01T00:01:00.000Z", &err) == 1);
    CHECK(al_store_sweep_claim(other, "runs", "node_b", "2026-01-01T00:00:00.000Z", "2026-01-01T00:01:00.000Z", &err) == 0);
    CHECK(al_store_sweep_claim(other, "runs", "node_b", "2026-01-01T00:00:30.000Z", "2026-01-01T00:01:30.000Z", &err) == 0);
    CHECK(al_store_sweep_claim(other, "runs", "node_b", "2026-01-01T00:01:00.000Z", "2026-01-01T00:02:00.000Z", &err) == 1);
    al_store_close(other);
}

#define APPENDERS 4
static void *append_loop(void *arg) {
    (void)arg;
    al_store *s = open_store();
    al_error err = { 0 };
    for (int i = 0; i < 25; i++)
        if (al_store_event_append(s, "run_many", "stdout", "{}", &err) < 0)
            fprintf(stderr, "append: %s\n", err.msg);
    al_store_close(s);
    return NULL;
}

/* Appends to one run from several connections at once: each lands once,
 * numbered 1..N without a gap. */
static void test_concurrent_events(al_store *s) {
    pthread_t t[APPENDERS];
    for (int i = 0; i < APPENDERS; i++)
        pthread_create(&t[i], NULL, append_loop, NULL);
    for (int i = 0; i < APPENDERS; i++)
        pthread_join(t[i], NULL);
    al_error err = { 0 };
    json_t *rows = al_store_query(s, &err, "SELECT COUNT(*) AS n, MIN(seq) AS lo, MAX(seq) AS hi FROM run_events "
                                           "WHERE run_id = 'run_many'", NULL);
    json_t *row = json_array_get(rows, 0);
    CHECK(json_integer_value(json_object_get(row, "n")) == APPENDERS * 25);
    CHECK(json_integer_value(json_object_get(row, "lo")) == 1 &&
          json_integer_value(json_object_get(row, "hi")) == APPENDERS * 25);
    json_decref(rows);
}

static void test_notifications(al_store *s, bool postgresql) {
    al_error err = { 0 };
    al_store_watch *w = NULL;
    int r = al_store_watch_open(target, &w, &err);
    if (!postgresql) {
        CHECK(r == -EOPNOTSUPP);
        CHECK(al_store_notify(s, AL_NOTIFY_EVENTS, "run_x", &err) == 0);
        return;
    }
    CHECK(r == 0);
    if (r < 0)
        return;
    char ch[64], pl[64];
    CHECK(al_store_watch_next(w, 50, ch, sizeof ch, pl, sizeof pl, &err) == 0);
    /* inside a unit of work: sent at its commit, not before */
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_notify(s, AL_NOTIFY_CANCEL, "run_y", &err) == 0);
    CHECK(al_store_watch_next(w, 100, ch, sizeof ch, pl, sizeof pl, &err) == 0);
    CHECK(al_store_commit(s, &err) == 0);
    CHECK(al_store_watch_next(w, 2000, ch, sizeof ch, pl, sizeof pl, &err) == 1);
    CHECK(strcmp(ch, AL_NOTIFY_CANCEL) == 0 && strcmp(pl, "run_y") == 0);
    /* rolled back: never sent */
    CHECK(al_store_begin(s, &err) == 0);
    CHECK(al_store_notify(s, AL_NOTIFY_QUEUE, "run_z", &err) == 0);
    al_store_rollback(s);
    CHECK(al_store_notify(s, AL_NOTIFY_EVENTS, "run_w", &err) == 0);
    CHECK(al_store_watch_next(w, 2000, ch, sizeof ch, pl, sizeof pl, &err) == 1);
    CHECK(strcmp(ch, AL_NOTIFY_EVENTS) == 0 && strcmp(pl, "run_w") == 0);
    /* a run's new event tells the other nodes by itself, numbered in order */
    CHECK(al_store_event_append(s, "run_ev", "state", "{}", &err) == 0);
    CHECK(al_store_watch_next(w, 2000, ch, sizeof ch, pl, sizeof pl, &err) == 1);
    CHECK(strcmp(ch, AL_NOTIFY_EVENTS) == 0 && strcmp(pl, "run_ev") == 0);
    al_store_watch_close(w);
}

/* A thread's package set: one row per language, written over (the later
 * set wins), read back as written, and a workspace's thread not another's. */
static void test_thread_packages(al_store *s) {
    al_error err = { 0 };
    al_store_thread_packages *v = NULL;
    size_t n = 9;
    CHECK(al_store_thread_packages_get(s, ws, "t-pk", &v, &n, &err) == 0 && n == 0);
    al_store_thread_packages_free(v, n);
    al_store_thread_packages py = { .lang = "python", .specs = "[\"a==1\"]", .layer = "sha256:aa",
                                    .resolved = "[{\"name\":\"a\",\"version\":\"1\"}]",
                                    .updated_at = "2026-01-01T00:00:00.000Z" };
    al_store_thread_packages nd = { .lang = "node", .specs = "[\"b@2\"]", .layer = "sha256:aa", .resolved = "[]",
                                    .updated_at = "2026-01-01T00:00:00.000Z" };
    CHECK(al_store_thread_packages_put(s, org, ws, "t-pk", &py, &err) == 0);
    CHECK(al_store_thread_packages_put(s, org, ws, "t-pk", &nd, &err) == 0);
    py.specs = "[\"a==2\",\"c\"]";
    py.layer = "sha256:bb";
    CHECK(al_store_thread_packages_put(s, org, ws, "t-pk", &py, &err) == 0);
    CHECK(al_store_thread_packages_get(s, ws, "t-pk", &v, &n, &err) == 0 && n == 2);
    /* ordered by language: node, python */
    CHECK(n == 2 && strcmp(v[0].lang, "node") == 0 && strcmp(v[0].specs, "[\"b@2\"]") == 0);
    CHECK(n == 2 && strcmp(v[1].lang, "python") == 0 && strcmp(v[1].specs, "[\"a==2\",\"c\"]") == 0 &&
          strcmp(v[1].layer, "sha256:bb") == 0 && strstr(v[1].resolved, "\"version\":\"1\"") != NULL);
    al_store_thread_packages_free(v, n);
    CHECK(al_store_thread_packages_get(s, "ws_other", "t-pk", &v, &n, &err) == 0 && n == 0);
    al_store_thread_packages_free(v, n);
}

/* One writer of a thread's set, as a run that ended its install does:
 * under the thread's lock, read the set, add its own spec, write it back. */
#define PK_WRITERS 4
#define PK_ROUNDS 5
static void *packages_writer(void *arg) {
    int me = (int)(intptr_t)arg;
    al_store *s = open_store();
    al_error err = { 0 };
    for (int i = 0; i < PK_ROUNDS; i++) {
        al_store_thread_packages *v = NULL;
        size_t n = 0;
        int r = al_store_begin(s, &err);
        if (r == 0)
            r = al_store_thread_packages_lock(s, ws, "t-pk-race", &err);
        if (r == 0)
            r = al_store_thread_packages_get(s, ws, "t-pk-race", &v, &n, &err);
        json_t *specs = r == 0 && n ? json_loads(v[0].specs, 0, NULL) : json_array();
        al_store_thread_packages_free(v, n);
        /* the other writers reach their read meanwhile, if nothing holds them */
        usleep(2000);
        json_array_append_new(specs, json_sprintf("p%d-%d==1", me, i));
        char *text = json_dumps(specs, JSON_COMPACT);
        json_decref(specs);
        al_store_thread_packages row = { .lang = "python", .specs = text, .layer = "", .resolved = "[]",
                                         .updated_at = "2026-01-01T00:00:00.000Z" };
        if (r == 0)
            r = al_store_thread_packages_put(s, org, ws, "t-pk-race", &row, &err);
        free(text);
        if (r < 0) {
            fprintf(stderr, "packages writer: %s\n", err.msg);
            al_store_rollback(s);
        } else if (al_store_commit(s, &err) < 0) {
            fprintf(stderr, "packages writer: commit: %s\n", err.msg);
        }
    }
    al_store_close(s);
    return NULL;
}

/* Several runs of one thread ending their installs at once: under the
 * thread's lock every read-then-write lands (on PostgreSQL's read
 * committed, without it, overlapping rounds lose all writes but one: seen
 * failing so); the lock outside a unit of work is refused. */
static void test_thread_packages_race(al_store *s) {
    al_error err = { 0 };
    CHECK(al_store_thread_packages_lock(s, ws, "t-pk-race", &err) == -EINVAL);
    pthread_t t[PK_WRITERS];
    for (int i = 0; i < PK_WRITERS; i++)
        pthread_create(&t[i], NULL, packages_writer, (void *)(intptr_t)i);
    for (int i = 0; i < PK_WRITERS; i++)
        pthread_join(t[i], NULL);
    al_store_thread_packages *v = NULL;
    size_t n = 0;
    CHECK(al_store_thread_packages_get(s, ws, "t-pk-race", &v, &n, &err) == 0 && n == 1);
    json_t *specs = n == 1 ? json_loads(v[0].specs, 0, NULL) : NULL;
    CHECK(json_array_size(specs) == PK_WRITERS * PK_ROUNDS);
    json_decref(specs);
    al_store_thread_packages_free(v, n);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: store-tests sqlite|PATH|postgresql://...\n");
        return 2;
    }
    char dir[] = "/tmp/airlock-store-test-XXXXXX";
    if (strcmp(argv[1], "sqlite") == 0) {
        if (!mkdtemp(dir))
            return 2;
        snprintf(target, sizeof target, "%s/airlock.db", dir);
    } else {
        snprintf(target, sizeof target, "%s", argv[1]);
    }
    test_concurrent_open();
    al_store *s = open_store();
    printf("store-tests on %s\n", al_store_backend_name(s));
    test_tenants(s);
    test_signin(s);
    test_units_of_work(s);
    test_unit_shapes(s);
    test_pool(s, strcmp(al_store_backend_name(s), "postgresql") == 0);
    test_idempotency(s);
    test_concurrent_credits(s);
    test_approvals(s);
    test_settings_and_ledger(s);
    test_audit_chain(s);
    test_run_states();
    test_leases(s);
    test_run_moves(s);
    test_claims(s);
    test_concurrent_events(s);
    test_storage_lifecycle(s);
    test_thread_packages(s);
    test_thread_packages_race(s);
    test_notifications(s, strcmp(al_store_backend_name(s), "postgresql") == 0);
    al_store_close(s);
    if (strcmp(argv[1], "sqlite") == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
