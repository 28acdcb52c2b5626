"""A long history written straight into a service's store, for
test_store_history.py and bench/store.py --history: copies of one row, as
many as asked, so that a plan that reads a whole history shows it."""

# rows per insert; on PostgreSQL each is followed by what its autovacuum
# would do soon after (VACUUM ANALYZE), so that the plans made for the next
# one (the artifacts trigger's among them) see the table as it is
SEED_CHUNK = 2000


def columns(sql, postgres, table):
    """TABLE's columns in order; SQL(query, *params) runs one statement on
    the store and gives its rows."""
    if postgres:
        rows = sql("SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                   "ORDER BY ordinal_position", table)
    else:
        rows = [(r[1],) for r in sql(f"PRAGMA table_info({table})")]
    return [r[0] for r in rows]


def copies(sql, postgres, table, of_id, n, values):
    """N copies of TABLE's row OF_ID, the columns in VALUES set to those SQL
    expressions of n.i (1..N), the rest as in the row (the runs' seq is the
    store's own); how many rows TABLE then holds."""
    cols = [c for c in columns(sql, postgres, table) if c != "seq" or "seq" in values]
    picked = ", ".join(values.get(c, f"t.{c}") for c in cols)
    for lo in range(0, n, SEED_CHUNK):
        hi = min(n, lo + SEED_CHUNK)
        sql(f"WITH RECURSIVE n(i) AS (SELECT {lo + 1} UNION ALL SELECT i + 1 FROM n WHERE i < {hi}) "
            f"INSERT INTO {table} ({', '.join(cols)}) SELECT {picked} FROM n CROSS JOIN {table} t WHERE t.id = ?", of_id)
        if postgres:
            # what autovacuum does within a minute of so many new rows and
            # the old versions the trigger updated: the dead ones gone, and
            # the plans cached on the service's connections, made when the
            # table was small, made again for what it holds now
            sql(f"VACUUM ANALYZE {table}")
    return sql(f"SELECT COUNT(*) FROM {table}")[0][0]


def past_runs(sql, postgres, run_id, n):
    """N finished runs of RUN_ID's person, each as RUN_ID."""
    return copies(sql, postgres, "runs", run_id, n, {"id": "'run_hist' || CAST(n.i AS TEXT)"})


def past_versions(sql, postgres, artifact_id, n, path):
    """N older versions of PATH in ARTIFACT_ID's thread (the same bytes);
    the store's trigger keeps which is current and what the organisation
    holds, as for any insert (each copy starts current, whatever the row it
    copies has become)."""
    return copies(sql, postgres, "artifacts", artifact_id, n,
                  {"id": "'art_hist' || CAST(n.i AS TEXT)", "path": f"'{path}'", "version": "n.i", "seq": "0 - n.i",
                   "superseded": "0"})
