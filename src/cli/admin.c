/* `airlock admin`: tenants and API keys, straight on the store. */
#include <string.h>
#include <sys/stat.h>

#include "../core/audit.h"
#include "../core/checkpoint.h"
#include "../core/console_auth.h"
#include "../core/folders.h"
#include "../core/service.h"
#include "cli.h"
#include "../store/governance.h"
#include "../store/tenants.h"

static int usage_to(FILE *f) {
    fprintf(f, "usage: airlock admin [--state DIR] [--store sqlite|postgresql://...] [--config FILE] COMMAND\n"
                    "  (the service's config file, --config or AIRLOCK_CONFIG, gives state, store and public_url\n"
                    "   unless --state, --store, AIRLOCK_STATE or AIRLOCK_STORE say otherwise)\n"
                    "  bootstrap                          first organisation, workspace, person and key, if none exist\n"
                    "  org create NAME\n"
                    "  workspace create --org ORG_ID NAME\n"
                    "  person create --workspace WS_ID NAME [--role admin|approver|member]\n"
                    "  key create --person PERSON_ID [--name NAME]  prints the key once; only its hash is kept\n"
                    "  key revoke KEY_ID                  the key is refused (401) from the next request on\n"
                    "  key rotate KEY_ID                  a new key for the same person; the old one is revoked\n"
                    "  login-link --person PERSON_ID [--url BASE] [--ttl-s SECONDS]\n"
                    "                                     a one-time link that signs the person in to the web console:\n"
                    "                                     BASE/login#token=... (BASE: the config's public_url, else\n"
                    "                                     http://127.0.0.1:8080; 15 minutes, or SECONDS from 1 to 900)\n"
                    "  list\n"
                    "  credits grant --org ORG_ID AMOUNT    (a negative amount takes back)\n"
                    "  credits show --org ORG_ID\n"
                    "  price set --workspace WS_ID AMOUNT  credits per run (the operator's, not a workspace admin's)\n"
                    "  price show --workspace WS_ID\n"
                    "  folder add --workspace WS_ID NAME PATH [--glob PATTERN]\n"
                    "                                     lend directory PATH (absolute, read-only always) to the\n"
                    "                                     workspace as folder NAME; PATTERN (fnmatch, on the path\n"
                    "                                     beneath the folder) limits the files it lists and imports\n"
                    "  folder ls --workspace WS_ID\n"
                    "  folder rm --workspace WS_ID NAME   runs already requested from it are refused at their start\n"
                    "  audit verify [--expect-head WS:SEQ:HASH]... [--checkpoint FILE]... [--key FILE | --verifier KEY]\n"
                    "                                     check every workspace's audit hash chain and print its head;\n"
                    "                                     fail unless each head given (printed or signed earlier) is in it\n"
                    "  audit key [--key FILE]             the verifier (public) key of the service's audit checkpoints\n"
                    "  layers ls                          the package layers, least recently used first, and their bytes\n"
                    "  layers prune [--older-than DAYS]   remove the layers unused for DAYS (the config's\n"
                    "                                     package_layer_retention_days unless given; 0: every one), and\n"
                    "                                     the least recently used over package_layers_max_mb; a layer in\n"
                    "                                     use by a run is never removed\n");
    return f == stdout ? 0 : 125;
}

static int usage(void) { return usage_to(stderr); }

/* Only bootstrap (CREATE) makes a store: any other command on a mistyped
 * --state or --store would answer about an empty one it had just made. */
static int open_store(const char *state, const char *store, bool create, al_store **ret, al_error *err) {
    char db[4200];
    int r = al_store_locate(store, state, db, sizeof db, err);
    if (r < 0)
        return r;
    if (!create)
        return al_store_open_existing(db, ret, err);
    if (al_store_is_embedded(db) && mkdir(state, 0700) < 0 && errno != EEXIST)
        return al_err(err, "state", errno, "mkdir %s: %m", state);
    return al_store_open(db, ret, err);
}

/* The words a command takes, by its first two: an argument beyond them (a
 * misplaced --state, an option of another command, a typo) is refused
 * rather than ignored. -1: not this table's to say (audit, credits). */
static int words_allowed(const char *cmd, const char *sub) {
    static const struct { const char *cmd, *sub; int n; } t[] = {
        { "bootstrap", NULL, 1 }, { "list", NULL, 1 }, { "org", "create", 3 },
        { "workspace", "create", 5 }, { "key", "create", 6 }, { "key", "revoke", 3 }, { "key", "rotate", 3 },
    };
    for (size_t k = 0; k < ELEMENTSOF(t); k++)
        if (strcmp(cmd, t[k].cmd) == 0 && (!t[k].sub || strcmp(sub, t[k].sub) == 0))
            return t[k].n;
    if (strcmp(cmd, "person") == 0 && strcmp(sub, "create") == 0)
        return 7; /* with --role ROLE; 5 without */
    if (strcmp(cmd, "price") == 0)
        return strcmp(sub, "set") == 0 ? 5 : 4;
    if (strcmp(cmd, "credits") == 0)
        return strcmp(sub, "grant") == 0 ? 5 : 4;
    return -1;
}

static int print_tenant(const al_store_tenant *t, void *userdata) {
    al_tenant_kind kind = *(const al_tenant_kind *)userdata;
    printf("  id=%s", t->id);
    if (kind == AL_TENANT_WORKSPACE)
        printf(" org_id=%s", t->parent_id);
    else if (kind == AL_TENANT_PERSON)
        printf(" workspace_id=%s", t->parent_id);
    else if (kind == AL_TENANT_KEY)
        printf(" person_id=%s key=%s...", t->parent_id, t->key_prefix);
    if (t->name)
        printf(" name=%s", t->name);
    printf(" created_at=%s", t->created_at);
    if (kind == AL_TENANT_KEY)
        printf(" revoked_at=%s", t->revoked_at[0] ? t->revoked_at : "-");
    printf("\n");
    return 0;
}

static int list(al_store *s, al_error *err) {
    static const char *const titles[_AL_TENANT_KIND_MAX] = {
        [AL_TENANT_ORG] = "organisations",
        [AL_TENANT_WORKSPACE] = "workspaces",
        [AL_TENANT_PERSON] = "people",
        [AL_TENANT_KEY] = "api keys",
    };
    for (al_tenant_kind k = 0; k < _AL_TENANT_KIND_MAX; k++) {
        printf("%s:\n", titles[k]);
        int r = al_store_tenants_each(s, k, print_tenant, &k, err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* `price set|show --workspace WS [AMOUNT]`: a workspace's price per run
 * is set here, by whoever runs the service, and audited in the workspace's
 * chain; PUT /v1/settings does not change it. */
static int price(al_store *s, const char *sub, const char *ws, const char *amount, al_error *err) {
    al_store_workspace w;
    int r = al_store_workspace_get(s, ws, &w, err);
    if (r == -ENOENT)
        return al_err(err, "price", ENOENT, "no workspace %s", ws);
    if (r < 0)
        return r;
    long long was = w.has_price ? (long long)w.price_per_run : -1;
    if (strcmp(sub, "set") == 0) {
        uint64_t v;
        if (al_parse_u64(amount, &v) < 0 || v > 1000000)
            return al_err(err, "price", EINVAL, "AMOUNT must be a whole number from 0 to 1000000");
        if ((r = al_store_price_set(s, ws, (int64_t)v, err)) < 0)
            return r;
        json_t *data = json_pack("{s:I, s:s}", "price_per_run", (json_int_t)v, "by", "operator");
        if (was >= 0)
            json_object_set_new(data, "was", json_integer(was));
        if ((r = al_audit_append(s, w.org_id, ws, "price.changed", NULL, NULL, data, err)) < 0)
            return r;
        was = (long long)v;
    }
    if (was >= 0)
        printf("workspace %s: price per run %lld\n", ws, was);
    else
        printf("workspace %s: price per run %d (the default)\n", ws, AL_PRICE_PER_RUN_DEFAULT);
    return 0;
}

/* ----------------------------------------------------------- folders */

#define FOLDER_USAGE 3

/* `folder add|ls|rm --workspace WS ...` (ARGV from the sub-command): a
 * connected folder registered, listed or removed, each change audited in
 * the workspace's chain. */
static int folder(al_store *s, const char *state, int argc, char **argv, al_error *err) {
    if (argc < 3 || strcmp(argv[1], "--workspace") != 0)
        return FOLDER_USAGE;
    const char *sub = argv[0], *ws = argv[2];
    al_store_workspace w;
    int r = al_store_workspace_get(s, ws, &w, err);
    if (r == -ENOENT)
        return al_err(err, "folder", ENOENT, "no workspace %s", ws);
    if (r < 0)
        return r;
    if (strcmp(sub, "ls") == 0 && argc == 3) {
        al_store_folder *v = NULL;
        size_t n = 0;
        if ((r = al_store_folders_list(s, ws, AL_FOLDERS_PER_WORKSPACE, &v, &n, err)) < 0)
            return r;
        for (size_t i = 0; i < n; i++)
            printf("%s\t%s\tglob=%s\tcreated_at=%s\n", v[i].name, v[i].path, v[i].glob[0] ? v[i].glob : "*",
                   v[i].created_at);
        al_store_folders_free(v, n);
        return 0;
    }
    if (strcmp(sub, "add") == 0 && (argc == 5 || (argc == 7 && strcmp(argv[5], "--glob") == 0))) {
        const char *glob = argc == 7 ? argv[6] : "";
        if ((r = al_folder_add(s, ws, argv[3], argv[4], glob, state, err)) < 0)
            return r;
        r = al_audit_append(s, w.org_id, ws, "folder.added", NULL, NULL,
                            json_pack("{s:s, s:s, s:s, s:s}", "name", argv[3], "path", argv[4], "glob", glob, "by",
                                      "operator"),
                            err);
        if (r == 0)
            printf("folder %s: %s (read-only)\n", argv[3], argv[4]);
        return r;
    }
    if (strcmp(sub, "rm") == 0 && argc == 4) {
        if ((r = al_folder_remove(s, ws, argv[3], err)) < 0)
            return r;
        if (r == 0)
            return al_err(err, "folder", ENOENT, "workspace %s has no folder named %s", ws, argv[3]);
        r = al_audit_append(s, w.org_id, ws, "folder.removed", NULL, NULL,
                            json_pack("{s:s, s:s}", "name", argv[3], "by", "operator"), err);
        if (r == 0)
            printf("folder %s removed\n", argv[3]);
        return r;
    }
    return FOLDER_USAGE;
}

/* ------------------------------------------------------------ audit */

#define AUDIT_USAGE 2
#define AUDIT_HEADS_MAX 64

static void audit_key_path(const char *state, const char *key, char *buf, size_t len) {
    if (key)
        snprintf(buf, len, "%s", key);
    else
        snprintf(buf, len, "%s/%s", state, AL_CHECKPOINT_KEY_FILE);
}

/* The head PATH (a checkpoint) signs, with a signature of K. */
static int audit_checkpoint_file(const al_checkpoint_key *k, const char *path, al_audit_head *ret, al_error *err) {
    _cleanup_fclose_ FILE *f = fopen(path, "re");
    if (!f)
        return al_err(err, "audit", errno, "%s: %m", path);
    char text[AL_CHECKPOINT_MAX + 1];
    size_t n = fread(text, 1, sizeof text, f);
    if (ferror(f))
        return al_err(err, "audit", EIO, "read %s", path);
    al_error why = { 0 };
    int r = al_checkpoint_open(k, text, n, ret, &why);
    if (r < 0)
        return al_err(err, "audit", -r, "%s: %s", path, why.msg);
    return 0;
}

/* The report of al_audit_verify, a line per workspace. */
static void audit_print(json_t *report) {
    size_t k;
    json_t *e;
    json_array_foreach(report, k, e) {
        const char *ws = json_string_value(json_object_get(e, "workspace_id"));
        if (json_is_true(json_object_get(e, "intact")))
            printf("workspace %s: %lld events, chain intact, head %s:%lld:%s\n", ws,
                   (long long)json_integer_value(json_object_get(e, "events")), ws,
                   (long long)json_integer_value(json_object_get(e, "head_seq")),
                   json_string_value(json_object_get(e, "head_hash")));
        else
            printf("workspace %s: BROKEN at event seq %lld (%s): %s\n", ws,
                   (long long)json_integer_value(json_object_get(e, "first_broken_seq")),
                   json_string_value(json_object_get(e, "kind")), json_string_value(json_object_get(e, "why")));
    }
    if (json_array_size(report) == 0)
        printf("no audit events yet\n");
}

/* `audit verify ...` and `audit key ...` (ARGV[0]): 0, 1 (a chain broken
 * or short of a head given), AUDIT_USAGE, or -errno. */
/* The heads the service last signed, kept in STATE/audit.heads outside the
 * store: without them a plain verify would call a chain cut back from its
 * newest events intact. Up to MAX - *N of them into HEADS; how many. */
static size_t service_heads(const char *state, al_audit_head *heads, size_t *n, size_t max) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", state, AL_CHECKPOINT_HEADS_FILE);
    _cleanup_fclose_ FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char line[256];
    size_t took = 0;
    while (*n < max && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        al_error e = { 0 };
        if (line[0] && al_audit_head_parse(line, &heads[*n], &e) == 0) {
            (*n)++;
            took++;
        }
    }
    if (took)
        printf("heads the service last signed (%s): %zu, checked\n", path, took);
    return took;
}

static int audit(al_store *s, const char *state, int argc, char **argv, al_error *err) {
    bool verify = argc >= 1 && strcmp(argv[0], "verify") == 0, key_cmd = argc >= 1 && strcmp(argv[0], "key") == 0;
    const char *key_file = NULL, *verifier = NULL, *checkpoints[AUDIT_HEADS_MAX];
    al_audit_head heads[AUDIT_HEADS_MAX];
    size_t nheads = 0, ncheck = 0;
    if (!verify && !key_cmd)
        return AUDIT_USAGE;
    for (int j = 1; j < argc; j += 2) {
        const char *o = argv[j], *v = j + 1 < argc ? argv[j + 1] : NULL;
        if (!v)
            return AUDIT_USAGE;
        if (strcmp(o, "--key") == 0)
            key_file = v;
        else if (verify && strcmp(o, "--verifier") == 0)
            verifier = v;
        else if (verify && strcmp(o, "--checkpoint") == 0 && ncheck + nheads < AUDIT_HEADS_MAX)
            checkpoints[ncheck++] = v;
        else if (verify && strcmp(o, "--expect-head") == 0 && ncheck + nheads < AUDIT_HEADS_MAX) {
            int r = al_audit_head_parse(v, &heads[nheads++], err);
            if (r < 0)
                return r;
        } else
            return AUDIT_USAGE;
    }
    char path[PATH_MAX + 64];
    audit_key_path(state, key_file, path, sizeof path);
    al_checkpoint_key k;
    if (key_cmd) {
        /* the operator may take the key's public half before the service's first start */
        int r = al_checkpoint_key_load(path, true, &k, err);
        if (r < 0)
            return r;
        char v[AL_CHECKPOINT_VERIFIER_MAX];
        al_checkpoint_key_verifier(&k, v);
        memset(&k, 0, sizeof k);
        printf("%s\n", v);
        return 0;
    }
    if (ncheck) {
        /* a verifier key given is the one trusted; else the operator's own key file */
        int r = verifier ? al_checkpoint_key_parse_verifier(verifier, &k, err) : al_checkpoint_key_load(path, false, &k, err);
        if (r < 0)
            return r;
        memset(k.seed, 0, sizeof k.seed);
        for (size_t c = 0; c < ncheck; c++) {
            al_audit_head *h = &heads[nheads++];
            if ((r = audit_checkpoint_file(&k, checkpoints[c], h, err)) < 0)
                return r;
            printf("checkpoint %s: signed by %s, head %s:%lld:%s\n", checkpoints[c], k.name, h->workspace_id,
                   (long long)h->seq, h->hash);
        }
    }
    service_heads(state, heads, &nheads, AUDIT_HEADS_MAX);
    json_t *report = NULL;
    int r = al_audit_verify(s, heads, nheads, &report, err);
    if (r >= 0) {
        audit_print(report);
        json_decref(report);
    }
    return r;
}

/* `admin bootstrap`: the first organisation, workspace, admin and key,
 * unless a key exists. */
static int bootstrap(al_store *s, const char *state, al_error *err) {
    int64_t keys = 0;
    if (al_store_keys_count(s, &keys, err) == 0 && keys > 0) {
        printf("already set up: an API key exists (airlock admin --state %s list)\n", state);
        /* who `make serve` prints a console sign-in link for */
        char admin[40];
        if (al_store_first_admin(s, admin, err) > 0)
            printf("first admin person: %s\n", admin);
        return 0;
    }
    char org[40], ws[40], per[40], id[40], key[64];
    int r;
    if ((r = al_store_create_org(s, "default", org, err)) == 0 &&
        (r = al_store_create_workspace(s, org, "default", ws, err)) == 0 &&
        (r = al_store_create_person(s, ws, "admin", "admin", per, err)) == 0 &&
        (r = al_store_create_key(s, per, key, id, err)) == 0) {
        printf("organisation %s, workspace %s, person %s\n", org, ws, per);
        printf("api key: %s\n", key);
        printf("(shown once: only its hash is stored)\n");
    }
    return r;
}

/* `admin key revoke|rotate OLD`: audited in the owner's workspace, in the
 * same chain as its runs. */
static int key_change(al_store *s, bool rotate, const char *old, al_error *err) {
    al_principal p;
    char id[40], key[64];
    int r = rotate ? al_store_rotate_key(s, old, key, id, &p, err) : al_store_revoke_key(s, old, &p, err);
    if (r == 0) {
        json_t *data = rotate ? json_pack("{s:s, s:s, s:s}", "key_id", old, "new_key_id", id, "via", "airlock admin")
                              : json_pack("{s:s, s:s}", "key_id", old, "via", "airlock admin");
        r = al_audit_append(s, p.org_id, p.workspace_id, rotate ? "key.rotated" : "key.revoked", p.person_id, NULL,
                            data, err);
        if (r < 0 && rotate) {
            /* an unaudited key is not handed out */
            al_error e2 = { 0 };
            (void)al_store_revoke_key(s, id, NULL, &e2);
        }
    }
    if (r < 0)
        return r;
    if (rotate)
        printf("key %s\napi key: %s\n(shown once: only its hash is stored)\nrevoked key %s\n", id, key, old);
    else
        printf("revoked key %s (person %s)\n", old, p.person_id);
    return 0;
}

/* `admin key create --person ID [--name NAME]`: audited (key.created) in
 * the person's workspace, as the API's keys are. */
static int key_create(al_store *s, const char *person, const char *name, al_error *err) {
    if (!al_key_name_ok(name))
        return al_err(err, "keys", EINVAL, "a key's name is 1 to %d printable characters", AL_KEY_NAME_MAX);
    char id[40], key[64];
    al_store_person_card card;
    const al_principal *p = &card.p;
    int r = al_store_create_key_named(s, person, name, key, id, err);
    if (r == 0 && (r = al_store_person_card_get(s, person, &card, err)) == 0 &&
        (r = al_audit_append(s, p->org_id, p->workspace_id, "key.created", p->person_id, NULL,
                             json_pack("{s:s, s:s, s:s}", "key_id", id, "name", name, "via", "airlock admin"), err)) < 0) {
        /* an unaudited key is not handed out */
        al_error e2 = { 0 };
        (void)al_store_revoke_key(s, id, NULL, &e2);
    }
    if (r < 0)
        return r;
    printf("key %s\napi key: %s\n(shown once: only its hash is stored)\n", id, key);
    return 0;
}

/* `admin login-link --person ID [--url BASE] [--ttl-s N]`: one line,
 * BASE/login#token=TOKEN. The token rides in the fragment, which browsers
 * never send, so no server's or proxy's log sees it; the console's page
 * reads it and redeems it (POST /v1/session). ARGV starts after the
 * command's word. ADMIN_USAGE for words it does not take. */
#define ADMIN_USAGE 2
static int login_link(al_store *s, const char *public_url, int argc, char **argv, al_error *err) {
    /* where people reach the console: the operator said so in the config */
    const char *person = NULL, *base = public_url && *public_url ? public_url : "http://127.0.0.1:8080", *ttl_arg = NULL;
    for (int k = 0; k < argc; k += 2) {
        if (k + 1 >= argc)
            return ADMIN_USAGE;
        if (strcmp(argv[k], "--person") == 0)
            person = argv[k + 1];
        else if (strcmp(argv[k], "--url") == 0)
            base = argv[k + 1];
        else if (strcmp(argv[k], "--ttl-s") == 0)
            ttl_arg = argv[k + 1];
        else
            return ADMIN_USAGE;
    }
    if (!person)
        return ADMIN_USAGE;
    size_t bl = strlen(base);
    if ((strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0) || bl > 512 ||
        strpbrk(base, "#?\" <>\t\r\n"))
        return al_err(err, "login-link", EINVAL, "--url is the console's address, http(s)://HOST[:PORT][/PATH] "
                      "(no query or fragment)");
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    uint64_t ttl = AL_LOGIN_LINK_TTL_S;
    if (ttl_arg && (al_parse_u64(ttl_arg, &ttl) < 0 || ttl < 1 || ttl > AL_LOGIN_LINK_TTL_S))
        return al_err(err, "login-link", EINVAL, "--ttl-s is 1 to %d seconds", AL_LOGIN_LINK_TTL_S);
    char token[64], expires[40];
    int r = al_login_link_issue(s, person, (int64_t)ttl, token, expires, err);
    if (r < 0)
        return r;
    printf("%.*s/login#token=%s\n", (int)bl, base, token);
    return 0;
}

/* what credits() answers beside 0 and -errno */
#define ADMIN_REFUSED 3

/* `admin credits grant|show --org ORG [AMOUNT]`: the grant, then the
 * balance and the last 20 entries of the ledger. */
static int credits(al_store *s, const char *sub, const char *org, const char *amount_arg, al_error *err) {
    bool grant = strcmp(sub, "grant") == 0;
    if (!grant && strcmp(sub, "show") != 0)
        return ADMIN_USAGE;
    if (grant) {
        if (!amount_arg)
            return ADMIN_USAGE;
        char *end;
        errno = 0;
        long long amount = strtoll(amount_arg, &end, 10);
        if (errno || *end || end == amount_arg || amount < -1000000000LL || amount > 1000000000LL) {
            fprintf(stderr, "airlock admin: credits grant: AMOUNT must be a whole number\n");
            return ADMIN_REFUSED;
        }
        int r = al_store_grant_credits(s, org, amount, err);
        if (r != 0)
            return r;
    }
    int64_t bal = 0;
    int r = al_store_credit_balance(s, org, &bal, err);
    if (r == -ENOENT)
        return al_err(err, "credits", ENOENT, "no organisation %s", org);
    if (r < 0)
        return r;
    printf("organisation %s: balance %lld\n", org, (long long)bal);
    al_store_ledger_filter f = { .org_id = org, .limit = 20 };
    al_store_ledger_entry *l = NULL;
    size_t n = 0;
    if ((r = al_store_ledger_list(s, &f, &l, &n, err)) < 0)
        return r;
    for (size_t k = 0; k < n; k++)
        printf("  %s %s %+lld -> %lld %s\n", l[k].created_at, al_ledger_kind_name(l[k].kind), (long long)l[k].amount,
               (long long)l[k].balance_after, l[k].run_id);
    free(l);
    return 0;
}

int cli_admin(int argc, char **argv) {
    if (cli_help_asked(argc, argv))
        return usage_to(stdout);
    /* the same store as `airlock serve`: --state and --store, else
     * AIRLOCK_STATE and AIRLOCK_STORE, else the service's config file's */
    const char *state = getenv("AIRLOCK_STATE"), *store = getenv("AIRLOCK_STORE"), *config = getenv("AIRLOCK_CONFIG");
    int i = 1;
    while (i + 1 < argc &&
           (strcmp(argv[i], "--state") == 0 || strcmp(argv[i], "--store") == 0 || strcmp(argv[i], "--config") == 0)) {
        if (strcmp(argv[i], "--state") == 0)
            state = argv[i + 1];
        else if (strcmp(argv[i], "--store") == 0)
            store = argv[i + 1];
        else
            config = argv[i + 1];
        i += 2;
    }
    if (i >= argc)
        return usage();
    static al_service_config cfg; /* large: not on the stack */
    al_service_config_default(&cfg);
    al_error cerr = { 0 };
    if (config && al_service_config_load(&cfg, config, &cerr) < 0) {
        fprintf(stderr, "airlock admin: %s\n", cerr.msg);
        return 125;
    }
    if (!state)
        state = cfg.state_dir;
    if (!store)
        store = cfg.store;
    for (int k = i; k < argc; k++)
        if (strcmp(argv[k], "--state") == 0 || strcmp(argv[k], "--store") == 0 || strcmp(argv[k], "--config") == 0) {
            fprintf(stderr, "airlock admin: %s goes before the command (airlock admin %s VALUE %s ...)\n", argv[k],
                    argv[k], argv[i]);
            return 125;
        }
    /* the layer store is the state's, no store's */
    if (strcmp(argv[i], "layers") == 0) {
        al_layer_limits lim = { cfg.package_layer_retention_days, (unsigned long long)cfg.package_layers_max_mb << 20 };
        return cli_admin_layers(state, &lim, argc - i - 1, argv + i + 1);
    }
    int allowed = words_allowed(argv[i], i + 1 < argc ? argv[i + 1] : "");
    if (allowed >= 0 && argc - i > allowed) {
        fprintf(stderr, "airlock admin: unexpected argument \"%s\"\n", argv[i + allowed]);
        return usage();
    }
    if (allowed == 7 && argc - i > 5 && (argc - i == 6 || strcmp(argv[i + 5], "--role") != 0)) {
        fprintf(stderr, "airlock admin: unexpected argument \"%s\" (person create takes --role ROLE)\n", argv[i + 5]);
        return usage();
    }
    al_error err = { 0 };
    al_store *s = NULL;
    if (open_store(state, store, strcmp(argv[i], "bootstrap") == 0, &s, &err) < 0) {
        fprintf(stderr, "airlock admin: %s\n", err.msg);
        return 125;
    }
    int r = 0;
    char id[40];
    const char *cmd = argv[i], *sub = i + 1 < argc ? argv[i + 1] : "";
    if (strcmp(cmd, "bootstrap") == 0) {
        r = bootstrap(s, state, &err);
    } else if (strcmp(cmd, "org") == 0 && strcmp(sub, "create") == 0 && i + 2 < argc) {
        if ((r = al_store_create_org(s, argv[i + 2], id, &err)) == 0)
            printf("organisation %s\n", id);
    } else if (strcmp(cmd, "workspace") == 0 && strcmp(sub, "create") == 0 && i + 4 < argc &&
               strcmp(argv[i + 2], "--org") == 0) {
        if ((r = al_store_create_workspace(s, argv[i + 3], argv[i + 4], id, &err)) == 0)
            printf("workspace %s\n", id);
    } else if (strcmp(cmd, "person") == 0 && strcmp(sub, "create") == 0 && i + 4 < argc &&
               strcmp(argv[i + 2], "--workspace") == 0 &&
               (argc - i == 5 || (argc - i == 7 && strcmp(argv[i + 5], "--role") == 0))) {
        const char *role = "member";
        if (i + 6 < argc && strcmp(argv[i + 5], "--role") == 0)
            role = argv[i + 6];
        if ((r = al_store_create_person(s, argv[i + 3], argv[i + 4], role, id, &err)) == 0)
            printf("person %s\n", id);
    } else if (strcmp(cmd, "key") == 0 && strcmp(sub, "create") == 0 && i + 3 < argc &&
               strcmp(argv[i + 2], "--person") == 0 &&
               (argc - i == 4 || (argc - i == 6 && strcmp(argv[i + 4], "--name") == 0))) {
        r = key_create(s, argv[i + 3], argc - i == 6 ? argv[i + 5] : "default", &err);
    } else if (strcmp(cmd, "login-link") == 0) {
        r = login_link(s, cfg.public_url, argc - i - 1, argv + i + 1, &err);
        if (r == ADMIN_USAGE) {
            al_store_close(s);
            return usage();
        }
    } else if (strcmp(cmd, "key") == 0 && (strcmp(sub, "revoke") == 0 || strcmp(sub, "rotate") == 0) && i + 3 == argc) {
        r = key_change(s, strcmp(sub, "rotate") == 0, argv[i + 2], &err);
    } else if (strcmp(cmd, "list") == 0) {
        r = list(s, &err);
    } else if (strcmp(cmd, "credits") == 0 && i + 3 < argc && strcmp(argv[i + 2], "--org") == 0) {
        r = credits(s, sub, argv[i + 3], i + 4 < argc ? argv[i + 4] : NULL, &err);
        if (r == ADMIN_USAGE || r == ADMIN_REFUSED) {
            al_store_close(s);
            return r == ADMIN_USAGE ? usage() : 125;
        }
    } else if (strcmp(cmd, "price") == 0 && i + 3 < argc && strcmp(argv[i + 2], "--workspace") == 0 &&
               (strcmp(sub, "show") == 0 || (strcmp(sub, "set") == 0 && i + 4 < argc))) {
        r = price(s, sub, argv[i + 3], strcmp(sub, "set") == 0 ? argv[i + 4] : NULL, &err);
    } else if (strcmp(cmd, "folder") == 0) {
        r = folder(s, state, argc - i - 1, argv + i + 1, &err);
        if (r == FOLDER_USAGE) {
            al_store_close(s);
            return usage();
        }
    } else if (strcmp(cmd, "audit") == 0) {
        r = audit(s, state, argc - i - 1, argv + i + 1, &err);
        if (r == 1 || r == AUDIT_USAGE) {
            al_store_close(s);
            return r == 1 ? 1 : usage();
        }
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
