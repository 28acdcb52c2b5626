/* `airlock admin`: tenants and API keys, straight on the store. */
#include <string.h>
#include <sys/stat.h>

#include "../service/service.h"
#include "cli.h"

static int usage(void) {
    fprintf(stderr, "usage: airlock admin [--state DIR] COMMAND\n"
                    "  bootstrap                          first organisation, workspace, person and key, if none exist\n"
                    "  org create NAME\n"
                    "  workspace create --org ORG_ID NAME\n"
                    "  person create --workspace WS_ID NAME\n"
                    "  key create --person PERSON_ID      prints the key once; only its hash is kept\n"
                    "  list\n");
    return 125;
}

static int open_store(const char *state, al_store **ret, al_error *err) {
    if (mkdir(state, 0700) < 0 && errno != EEXIST)
        return al_err(err, "state", errno, "mkdir %s: %m", state);
    char db[4200];
    snprintf(db, sizeof db, "%s/airlock.db", state);
    return al_store_open(db, ret, err);
}

static int list(al_store *s, al_error *err) {
    static const struct { const char *title, *sql; } q[] = {
        { "organisations", "SELECT id, name, created_at FROM orgs ORDER BY created_at" },
        { "workspaces", "SELECT id, org_id, name, created_at FROM workspaces ORDER BY created_at" },
        { "people", "SELECT id, workspace_id, name, created_at FROM people ORDER BY created_at" },
        { "api keys", "SELECT id, person_id, prefix || '...' AS key, created_at, revoked_at FROM api_keys ORDER BY created_at" },
    };
    for (size_t i = 0; i < ELEMENTSOF(q); i++) {
        json_t *rows = al_store_query(s, err, q[i].sql, NULL);
        if (!rows)
            return -EIO;
        printf("%s:\n", q[i].title);
        size_t k;
        json_t *row;
        json_array_foreach(rows, k, row) {
            const char *key;
            json_t *v;
            printf(" ");
            json_object_foreach(row, key, v) printf(" %s=%s", key, json_is_string(v) ? json_string_value(v) : "-");
            printf("\n");
        }
        json_decref(rows);
    }
    return 0;
}

int cli_admin(int argc, char **argv) {
    const char *state = getenv("AIRLOCK_STATE");
    if (!state)
        state = "/var/lib/airlock";
    int i = 1;
    if (i + 1 < argc && strcmp(argv[i], "--state") == 0) {
        state = argv[i + 1];
        i += 2;
    }
    if (i >= argc)
        return usage();
    al_error err = { 0 };
    al_store *s = NULL;
    if (open_store(state, &s, &err) < 0) {
        fprintf(stderr, "airlock admin: %s\n", err.msg);
        return 125;
    }
    int r = 0;
    char id[40], key[64];
    const char *cmd = argv[i], *sub = i + 1 < argc ? argv[i + 1] : "";
    if (strcmp(cmd, "bootstrap") == 0) {
        json_t *rows = al_store_query(s, &err, "SELECT COUNT(*) AS n FROM api_keys", NULL);
        bool have = rows && json_integer_value(json_object_get(json_array_get(rows, 0), "n")) > 0;
        json_decref(rows);
        if (have) {
            printf("already set up: an API key exists (airlock admin --state %s list)\n", state);
        } else {
            char org[40], ws[40], per[40];
            if ((r = al_store_create_org(s, "default", org, &err)) == 0 &&
                (r = al_store_create_workspace(s, org, "default", ws, &err)) == 0 &&
                (r = al_store_create_person(s, ws, "admin", per, &err)) == 0 &&
                (r = al_store_create_key(s, per, key, id, &err)) == 0) {
                printf("organisation %s, workspace %s, person %s\n", org, ws, per);
                printf("api key: %s\n", key);
                printf("(shown once: only its hash is stored)\n");
            }
        }
    } else if (strcmp(cmd, "org") == 0 && strcmp(sub, "create") == 0 && i + 2 < argc) {
        if ((r = al_store_create_org(s, argv[i + 2], id, &err)) == 0)
            printf("organisation %s\n", id);
    } else if (strcmp(cmd, "workspace") == 0 && strcmp(sub, "create") == 0 && i + 4 < argc &&
               strcmp(argv[i + 2], "--org") == 0) {
        if ((r = al_store_create_workspace(s, argv[i + 3], argv[i + 4], id, &err)) == 0)
            printf("workspace %s\n", id);
    } else if (strcmp(cmd, "person") == 0 && strcmp(sub, "create") == 0 && i + 4 < argc &&
               strcmp(argv[i + 2], "--workspace") == 0) {
        if ((r = al_store_create_person(s, argv[i + 3], argv[i + 4], id, &err)) == 0)
            printf("person %s\n", id);
    } else if (strcmp(cmd, "key") == 0 && strcmp(sub, "create") == 0 && i + 3 < argc &&
               strcmp(argv[i + 2], "--person") == 0) {
        if ((r = al_store_create_key(s, argv[i + 3], key, id, &err)) == 0)
            printf("key %s\napi key: %s\n(shown once: only its hash is stored)\n", id, key);
    } else if (strcmp(cmd, "list") == 0) {
        r = list(s, &err);
    } else {
        al_store_close(s);
        return usage();
    }
    al_store_close(s);
    if (r < 0) {
        fprintf(stderr, "airlock admin: %s\n", err.msg);
        return 125;
    }
    return 0;
}
