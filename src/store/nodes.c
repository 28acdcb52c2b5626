/* Nodes, their leases, the shared queue and notifications (nodes.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "nodes.h"

int al_store_node_join(al_store *s, const char *id, const char *host, int64_t pid, const char *now, const char *lease_until,
                       al_error *err) {
    int r = al_store_exec(s, err, "INSERT INTO nodes (id, host, pid, started_at, lease_until) VALUES (?, ?, ?, ?, ?)", "ssiss",
                          id, host, pid, now, lease_until);
    return r < 0 ? r : 0;
}

int al_store_node_renew(al_store *s, const char *id, const char *lease_until, al_error *err) {
    /* never past a death sentence: a node declared dead stays dead */
    int r = al_store_exec(s, err, "UPDATE nodes SET lease_until = ? WHERE id = ? AND dead_at IS NULL AND stopped_at IS NULL",
                          "ss", lease_until, id);
    return r < 0 ? r : r > 0;
}

int al_store_node_leave(al_store *s, const char *id, const char *now, al_error *err) {
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    /* what it claimed and did not start waits for another node */
    if ((r = al_store_exec(s, err, "UPDATE runs SET node_id = NULL WHERE node_id = ? AND state = 'queued'", "s", id)) < 0 ||
        (r = al_store_exec(s, err, "UPDATE nodes SET stopped_at = ?, lease_until = ? WHERE id = ? AND dead_at IS NULL", "sss",
                           now, now, id)) < 0) {
        al_store_rollback(s);
        return r;
    }
    return al_store_commit(s, err);
}

/* Copy the "id" of each row into IDS, at most MAX: how many. */
static int ids_of(json_t *rows, char (*ids)[40], int max) {
    int n = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *id = json_string_value(json_object_get(row, "id"));
        if (!id || strlen(id) >= 40 || n >= max)
            continue;
        snprintf(ids[n++], 40, "%s", id);
    }
    return n;
}

int al_store_nodes_reap(al_store *s, const char *self, const char *now, char (*ret_ids)[40], int max, al_error *err) {
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    /* one reaper at a time across nodes: each dead node is declared once */
    if ((r = al_store_lock(s, err, "nodes")) < 0)
        goto fail;
    json_t *rows = al_store_query(s, err,
                                  "SELECT id FROM nodes WHERE lease_until < ? AND dead_at IS NULL AND stopped_at IS NULL "
                                  "AND id != ? ORDER BY id",
                                  "ss", now, self);
    if (!rows) {
        r = -EIO;
        goto fail;
    }
    int n = ids_of(rows, ret_ids, max);
    json_decref(rows);
    for (int i = 0; i < n; i++) {
        /* the lease again: a renewal that landed since the read wins */
        int d = al_store_exec(s, err,
                              "UPDATE nodes SET dead_at = ?, dead_by = ? WHERE id = ? AND dead_at IS NULL AND lease_until < ?",
                              "ssss", now, self, ret_ids[i], now);
        if (d < 0) {
            r = d;
            goto fail;
        }
        if (d == 0) {
            /* alive after all: not reported, nothing of it touched */
            memmove(ret_ids[i], ret_ids[i + 1], (size_t)(n - i - 1) * sizeof ret_ids[0]);
            n--;
            i--;
            continue;
        }
        /* what it claimed and never started waits for another node */
        if ((r = al_store_exec(s, err, "UPDATE runs SET node_id = NULL WHERE node_id = ? AND state = 'queued'", "s",
                               ret_ids[i])) < 0)
            goto fail;
    }
    if ((r = al_store_commit(s, err)) < 0)
        return r;
    return n;
fail:
    al_store_rollback(s);
    return r < 0 ? r : -EIO;
}

int al_store_nodes_on_host(al_store *s, const char *host, const char *self, char (*ret_ids)[40], int64_t *ret_pids,
                           int max, al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT id, pid FROM nodes WHERE host = ? AND id != ? AND dead_at IS NULL "
                                  "AND stopped_at IS NULL ORDER BY id",
                                  "ss", host, self);
    if (!rows)
        return -EIO;
    int n = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *id = json_string_value(json_object_get(row, "id"));
        if (!id || strlen(id) >= 40 || n >= max)
            continue;
        snprintf(ret_ids[n], 40, "%s", id);
        ret_pids[n++] = json_integer_value(json_object_get(row, "pid"));
    }
    json_decref(rows);
    return n;
}

int al_store_node_expire(al_store *s, const char *id, al_error *err) {
    int r = al_store_exec(s, err, "UPDATE nodes SET lease_until = ? WHERE id = ? AND dead_at IS NULL AND stopped_at IS NULL",
                          "ss", "0000-00-00T00:00:00.000Z", id);
    return r < 0 ? r : 0;
}

int al_store_nodes_forget(al_store *s, const char *before, al_error *err) {
    return al_store_exec(s, err,
                         "DELETE FROM nodes WHERE (stopped_at IS NOT NULL AND stopped_at < ?) OR (dead_at IS NOT NULL AND dead_at < ?)",
                         "ss", before, before);
}

int al_store_node_runs(al_store *s, const char *node_id, char (*ret_ids)[40], int max, al_error *err) {
    json_t *rows = node_id ? al_store_query(s, err,
                                            "SELECT id FROM runs WHERE node_id = ? AND state IN ('provisioning', 'running') "
                                            "ORDER BY seq",
                                            "s", node_id)
                           : al_store_query(s, err,
                                            "SELECT id FROM runs WHERE node_id IS NULL AND state IN ('provisioning', 'running') "
                                            "ORDER BY seq",
                                            NULL);
    if (!rows)
        return -EIO;
    int n = ids_of(rows, ret_ids, max);
    json_decref(rows);
    return n;
}

int al_store_nodes_alive(al_store *s, const char *now, al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT COUNT(*) AS n FROM nodes WHERE lease_until >= ? AND dead_at IS NULL "
                                  "AND stopped_at IS NULL",
                                  "s", now);
    if (!rows)
        return -EIO;
    int n = (int)json_integer_value(json_object_get(json_array_get(rows, 0), "n"));
    json_decref(rows);
    return n;
}

/* A person's runs that hold a slot somewhere: claimed (queued with a node)
 * or provisioning or running, on every node. The states are one IN list so
 * that the count is a search of runs_person (person_id, state) for three
 * states: written as an OR of two, it read every run the person ever made. */
#define HOLDS_SLOT \
    "(a.state IN ('provisioning', 'running', 'queued') AND (a.state <> 'queued' OR a.node_id IS NOT NULL))"

int al_store_claim_run(al_store *s, const char *node_id, al_store_claim *ret, al_error *err) {
    ret->more = ret->blocked = false;
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    /* claims are serialised across nodes, so that two nodes never both
     * see a person under their cap and both start one of theirs */
    if ((r = al_store_lock(s, err, "claim")) < 0) {
        al_store_rollback(s);
        return r;
    }
    /* the eligible first; the second row says what else waits. q is
     * materialised: SQLite would otherwise count each queued run's holder
     * three times, once for each place `active` is named. */
    json_t *rows = al_store_query(s, err,
                                  "WITH q AS MATERIALIZED ("
                                  " SELECT r.id, r.person_id, r.org_id, r.cap, r.seq,"
                                  " (SELECT COUNT(*) FROM runs a WHERE a.person_id = r.person_id AND " HOLDS_SLOT ") AS active"
                                  " FROM runs r WHERE r.state = 'queued' AND r.node_id IS NULL) "
                                  "SELECT id, person_id, org_id, cap, active < cap AS eligible FROM q "
                                  "ORDER BY CASE WHEN active < cap THEN 0 ELSE 1 END, active, seq LIMIT 2",
                                  NULL);
    json_t *row = rows ? json_array_get(rows, 0) : NULL, *next = rows ? json_array_get(rows, 1) : NULL;
    bool eligible = json_integer_value(json_object_get(row, "eligible")) != 0;
    ret->more = next && json_integer_value(json_object_get(next, "eligible")) != 0;
    /* what waits behind the claimed one; all of it when none is claimed */
    ret->blocked = (row && !eligible) || (next && !ret->more);
    const char *id = json_string_value(json_object_get(row, "id")), *person = json_string_value(json_object_get(row, "person_id")),
               *org = json_string_value(json_object_get(row, "org_id"));
    if (!rows) {
        r = -EIO;
    } else if (!row || !eligible) {
        r = 0;
    } else if (!id || !person || !org || strlen(id) >= sizeof ret->run_id || strlen(person) >= sizeof ret->person_id ||
               strlen(org) >= sizeof ret->org_id) {
        r = al_err(err, "store", EIO, "a queued run's row is malformed");
    } else {
        r = al_store_exec_commit(s, err, "UPDATE runs SET node_id = ? WHERE id = ? AND state = 'queued' AND node_id IS NULL",
                                 "ss", node_id, id);
        if (r > 0) {
            snprintf(ret->run_id, sizeof ret->run_id, "%s", id);
            snprintf(ret->person_id, sizeof ret->person_id, "%s", person);
            snprintf(ret->org_id, sizeof ret->org_id, "%s", org);
            ret->cap = (int)json_integer_value(json_object_get(row, "cap"));
            r = 1;
        }
        json_decref(rows);
        return r; /* committed, or rolled back on a failure */
    }
    json_decref(rows);
    if (r < 0) {
        al_store_rollback(s);
        return r;
    }
    int c = al_store_commit(s, err);
    return c < 0 ? c : r;
}

int al_store_queued_count(al_store *s, const char *person_id, const char *org_id, const char *except, al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT COUNT(*) AS n FROM runs WHERE state = 'queued' AND id != ? "
                                  "AND (CAST(? AS TEXT) IS NULL OR person_id = ?) AND (CAST(? AS TEXT) IS NULL OR org_id = ?)",
                                  "sSSSS", except ? except : "", person_id, person_id, org_id, org_id);
    if (!rows)
        return -EIO;
    int n = (int)json_integer_value(json_object_get(json_array_get(rows, 0), "n"));
    json_decref(rows);
    return n;
}

int al_store_queue_counts_of(al_store *s, const char *person_id, const char *org_id, const char *except,
                             al_store_queue_counts *ret, al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT COUNT(*) AS a, COALESCE(SUM(CASE WHEN person_id = ? THEN 1 ELSE 0 END), 0) AS p, "
                                  "COALESCE(SUM(CASE WHEN org_id = ? THEN 1 ELSE 0 END), 0) AS o "
                                  "FROM runs WHERE state = 'queued' AND id != ?",
                                  "sss", person_id ? person_id : "", org_id ? org_id : "", except ? except : "");
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    ret->all = (int)json_integer_value(json_object_get(row, "a"));
    ret->person = (int)json_integer_value(json_object_get(row, "p"));
    ret->org = (int)json_integer_value(json_object_get(row, "o"));
    json_decref(rows);
    return 0;
}

int al_store_queue_admit(al_store *s, const char *run_id, int64_t cap, const al_store_queue_limits *lim,
                         al_store_queue_counts *ret, al_error *err) {
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    /* admissions are serialised across nodes: two cannot both take the
     * queue's last place */
    *ret = (al_store_queue_counts){ 0 };
    if ((r = al_store_lock(s, err, "queue")) < 0 ||
        (r = al_store_queue_counts_of(s, lim->person_id, lim->org_id, run_id, ret, err)) < 0)
        goto out;
    if (ret->all >= lim->queue_max) {
        r = -EAGAIN;
        goto out;
    }
    if (lim->person_id) {
        ret->person += lim->person_extra;
        if (ret->person >= lim->per_person) {
            r = -EDQUOT;
            goto out;
        }
        if (lim->org_id && ret->org >= lim->per_org) {
            r = -EUSERS;
            goto out;
        }
    }
    /* held by the node admitting it: a run another node claimed (or one
     * admitted already) is not taken from it */
    r = al_store_exec_commit(s, err,
                             "UPDATE runs SET node_id = NULL, cap = ? WHERE id = ? AND state = 'queued' AND node_id = ?",
                             "iss", cap, run_id, lim->node_id);
    return r < 0 ? r : r > 0;
out:
    al_store_rollback(s);
    return r;
}

int al_store_notify(al_store *s, const char *channel, const char *payload, al_error *err) {
    if (!s->be->notify)
        return 0;
    al_store_conn *c = al_store_take(s);
    int r = s->be->notify(c->conn, c->depth > 0, err, channel, payload ? payload : "");
    al_store_put(s, c);
    return r;
}

struct al_store_watch {
    const al_store_backend *be;
    void *w;
    al_store *own; /* what its connections said is not returned (al_store_watch_skip_own) */
};

void al_store_watch_skip_own(al_store_watch *w, al_store *s) { w->own = s; }

int al_store_watch_open(const char *target, al_store_watch **ret, al_error *err) {
    const al_store_backend *be = al_store_backend_for(target);
    if (!be->watch_open)
        return al_err(err, "store", EOPNOTSUPP, "the %s store has one node: there is nothing to watch", be->name);
    al_store_watch *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->be = be;
    static const char *channels[] = { AL_NOTIFY_EVENTS, AL_NOTIFY_CANCEL, AL_NOTIFY_QUEUE, NULL };
    int r = be->watch_open(target, channels, &w->w, err);
    if (r < 0) {
        free(w);
        return r;
    }
    *ret = w;
    return 0;
}

int al_store_watch_next(al_store_watch *w, int timeout_ms, char *channel, size_t channel_len, char *payload,
                        size_t payload_len, al_error *err) {
    int sender = 0;
    int r = w->be->watch_next(w->w, timeout_ms, channel, channel_len, payload, payload_len, &sender, err);
    /* this node's own: it told itself already, when it sent it */
    if (r == 1 && w->own && al_store_own_session(w->own, sender))
        return 0;
    return r;
}

void al_store_watch_close(al_store_watch *w) {
    if (!w)
        return;
    w->be->watch_close(w->w);
    free(w);
}
