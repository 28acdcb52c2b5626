/*
 * E2B-compatible sandboxes (sandbox.h): the control plane's operations on
 * the store's rows and the host directories, the sandbox plane's admission
 * and the mapping of E2B's paths. A sandbox runs nothing of its own: its
 * commands are ordinary runs that stage home/ as /work (e2b exec).
 */
#include <ctype.h>
#include <errno.h>
#include <nettle/hmac.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../util/hash.h"
#include "governance.h"
#include "sandbox_int.h"
#include "service.h"
#include "service_int.h"
#include "text.h"

static const char *const state_names[_AL_SANDBOX_STATE_MAX] = {
    [AL_SANDBOX_RUNNING] = "running",
    [AL_SANDBOX_PAUSED] = "paused",
};

const char *al_sandbox_state_name(al_sandbox_state st) {
    return st >= 0 && st < _AL_SANDBOX_STATE_MAX ? state_names[st] : "running";
}

void al_sandbox_clear(al_sandbox *sb) {
    if (!sb)
        return;
    json_decref(sb->metadata);
    json_decref(sb->env_vars);
    memset(sb, 0, sizeof *sb);
}

int al_sandbox_from_store(const al_store_sandbox *b, al_sandbox *out, al_error *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", b->id);
    out->owner = b->owner;
    snprintf(out->key_id, sizeof out->key_id, "%s", b->key_id);
    snprintf(out->template_id, sizeof out->template_id, "%s", b->template_id);
    snprintf(out->image, sizeof out->image, "%s", b->image);
    snprintf(out->network, sizeof out->network, "%s", b->network);
    snprintf(out->started_at, sizeof out->started_at, "%s", b->started_at);
    snprintf(out->end_at, sizeof out->end_at, "%s", b->end_at);
    out->state = strcmp(b->state, "paused") == 0 ? AL_SANDBOX_PAUSED : AL_SANDBOX_RUNNING;
    snprintf(out->thread_id, sizeof out->thread_id, "e2b-%s", b->id);
    out->bytes = b->bytes;
    snprintf(out->owner_name, sizeof out->owner_name, "%s", b->owner_name ? b->owner_name : "");
    out->metadata = json_loads(b->metadata, 0, NULL);
    out->env_vars = json_loads(b->env_vars, 0, NULL);
    if (!json_is_object(out->metadata) || !json_is_object(out->env_vars)) {
        al_sandbox_clear(out);
        return al_err(err, "sandbox", EIO, "a stored sandbox's metadata is malformed");
    }
    return 0;
}

/* Why SEG, one segment of a path, may not name a file (the /out name
 * rules: valid UTF-8, no control or bidirectional-override character, at
 * most 255 bytes), or NULL. */
const char *al_sandbox_name_problem(const char *seg, size_t len) {
    if (len > 255)
        return "a name is longer than 255 bytes";
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        size_t k = al_utf8_decode((const unsigned char *)seg + i, len - i, &cp);
        if (k == 0)
            return "a name is not valid UTF-8";
        if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) || (cp >= 0x202a && cp <= 0x202e) ||
            (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e || cp == 0x200f)
            return "a name has a control or bidirectional-override character";
        i += k;
    }
    return NULL;
}

/* ------------------------------------------------------------ opening beneath a tree */

int al_sandbox_beneath(int dirfd, const char *rel, int flags, mode_t mode) {
    struct open_how how = { .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
                            .mode = (flags & O_CREAT) ? mode : 0,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
                                       RESOLVE_NO_XDEV };
    long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
    return fd < 0 ? -errno : (int)fd;
}

/* ------------------------------------------------------------ environment names */

const char *al_sandbox_env_problem(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > AL_SANDBOX_ENV_NAME_MAX || !(isalpha((unsigned char)name[0]) || name[0] == '_'))
        return "is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128 bytes)";
    for (const char *c = name; *c; c++)
        if (!(isascii((unsigned char)*c) && (isalnum((unsigned char)*c) || *c == '_')))
            return "is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128 bytes)";
    /* the box's own: what it says of itself (HOME, the egress proxy's
     * address: a command that moved it would only lose its network, but
     * what the box says of itself stays true), airlock's and E2B's */
    static const char *const own[] = { "HOME", "PWD", "OLDPWD", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy",
                                       "https_proxy", "no_proxy", "npm_config_proxy", "npm_config_https_proxy" };
    static const char *const own_prefixes[] = { "AIRLOCK_", "E2B_SANDBOX" };
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (strcmp(name, own[i]) == 0)
            return "is one the box sets itself (HOME, AIRLOCK_*, E2B_SANDBOX*, the proxy's)";
    for (size_t i = 0; i < sizeof own_prefixes / sizeof *own_prefixes; i++)
        if (strncmp(name, own_prefixes[i], strlen(own_prefixes[i])) == 0)
            return "is one the box sets itself (HOME, AIRLOCK_*, E2B_SANDBOX*, the proxy's)";
    /* those that make the loader, libc or the shell run other code than
     * the command's; PATH, LANG and the rest are the command's to change */
    static const char *const code[] = { "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "GCONV_PATH",
                                        "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS" };
    static const char *const code_prefixes[] = { "LD_", "BASH_FUNC_", "MALLOC_", "GLIBC_" };
    for (size_t i = 0; i < sizeof code / sizeof *code; i++)
        if (strcmp(name, code[i]) == 0)
            return "makes the shell, the loader or libc run other code (LD_*, BASH_ENV, ...)";
    for (size_t i = 0; i < sizeof code_prefixes / sizeof *code_prefixes; i++)
        if (strncmp(name, code_prefixes[i], strlen(code_prefixes[i])) == 0)
            return "makes the shell, the loader or libc run other code (LD_*, BASH_ENV, ...)";
    return NULL;
}

/* ------------------------------------------------------------ paths */

#define PATH_DEPTH_MAX 15
#define ROOTS_MSG "only /home/user (= /work) and /out are kept in an airlock sandbox"

int al_sandbox_path(const char *path, al_sandbox_root *root, char *rel, size_t n, al_error *err) {
    if (!path || !*path)
        return al_err(err, "path", EINVAL, "a path is required (" ROOTS_MSG ")");
    if (strlen(path) > 4096)
        return al_err(err, "path", EINVAL, "the path is longer than 4096 bytes");
    /* a relative path is one under /home/user, E2B's working directory */
    const char *p = path;
    bool absolute = *p == '/';
    int skip = 0; /* the root's own segments still to match */
    *root = AL_SANDBOX_HOME;
    rel[0] = '\0';
    size_t o = 0;
    int depth = 0, seen = 0;
    while (*p) {
        p += strspn(p, "/");
        if (!*p)
            break;
        size_t l = strcspn(p, "/");
        const char *seg = p;
        p += l;
        if (l == 1 && seg[0] == '.')
            continue;
        if (l == 2 && seg[0] == '.' && seg[1] == '.')
            return al_err(err, "path", EINVAL, "%s: \"..\" is not allowed in a sandbox's paths", path);
        if (absolute && seen++ == 0) {
            /* the root: /home/user, /work or /out */
            if (l == 4 && memcmp(seg, "home", 4) == 0) {
                skip = 1;
                continue;
            }
            if (l == 4 && memcmp(seg, "work", 4) == 0)
                continue;
            if (l == 3 && memcmp(seg, "out", 3) == 0) {
                *root = AL_SANDBOX_OUT;
                continue;
            }
            return al_err(err, "path", EINVAL, "%s: " ROOTS_MSG, path);
        }
        if (skip) {
            if (l != 4 || memcmp(seg, "user", 4) != 0)
                return al_err(err, "path", EINVAL, "%s: " ROOTS_MSG, path);
            skip = 0;
            continue;
        }
        const char *bad = al_sandbox_name_problem(seg, l);
        if (bad)
            return al_err(err, "path", EINVAL, "%s: %s", path, bad);
        if (++depth > PATH_DEPTH_MAX)
            return al_err(err, "path", EINVAL, "%s: deeper than %d directories", path, PATH_DEPTH_MAX);
        if (o + (o ? 1 : 0) + l + 1 > n)
            return al_err(err, "path", EINVAL, "%s: the path is too long", path);
        if (o)
            rel[o++] = '/';
        memcpy(rel + o, seg, l);
        o += l;
        rel[o] = '\0';
    }
    if (absolute && (seen == 0 || skip))
        return al_err(err, "path", EINVAL, "%s: " ROOTS_MSG, path);
    return 0;
}

int al_sandbox_dir(al_service *s, const char *id, al_sandbox_root root, char *buf, size_t n) {
    int w = snprintf(buf, n, "%s/sandboxes/%s/%s", s->cfg.state_dir, id, root == AL_SANDBOX_OUT ? "out" : "home");
    return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

int al_sandbox_make_dirs(al_service *s, const char *id, al_error *err) {
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s/sandboxes", s->cfg.state_dir);
    if (mkdir(d, 0700) < 0 && errno != EEXIST)
        return al_err(err, "sandbox", errno, "cannot make %s: %m", d);
    snprintf(d, sizeof d, "%s/sandboxes/%s", s->cfg.state_dir, id);
    if (mkdir(d, 0700) < 0)
        return al_err(err, "sandbox", errno, "cannot make %s: %m", d);
    for (int r = AL_SANDBOX_HOME; r <= AL_SANDBOX_OUT; r++) {
        if (al_sandbox_dir(s, id, (al_sandbox_root)r, d, sizeof d) < 0)
            return al_err(err, "sandbox", ENAMETOOLONG, "the state directory's path is too long");
        if (mkdir(d, 0700) < 0)
            return al_err(err, "sandbox", errno, "cannot make %s: %m", d);
    }
    return 0;
}

void al_sandbox_remove_dirs(al_service *s, const char *id) {
    char d[PATH_MAX];
    if (snprintf(d, sizeof d, "%s/sandboxes/%s", s->cfg.state_dir, id) < (int)sizeof d)
        al_rm_tree(AT_FDCWD, d);
}

/* ------------------------------------------------------------ access tokens */

/* The service's secret for access tokens into KEY: STATE/sandbox-token.key,
 * made on first use by whichever node links its copy in first (link(2)
 * does not replace), so that nodes sharing STATE agree. */
static int token_key(al_service *s, uint8_t key[32], al_error *err) {
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/sandbox-token.key", s->cfg.state_dir);
    for (int attempt = 0; attempt < 2; attempt++) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0) {
            if (read(fd, key, 32) != 32)
                return al_err(err, "sandbox", EIO, "%s is not 32 bytes: remove it (every sandbox's token changes)",
                              path);
            return 0;
        }
        if (errno != ENOENT || attempt)
            return al_err(err, "sandbox", errno, "cannot read %s: %m", path);
        uint8_t fresh[32];
        if (getrandom(fresh, sizeof fresh, 0) != sizeof fresh)
            return al_err(err, "sandbox", EIO, "no randomness for the token key");
        /* a name of its own (two threads may make it at once), never truncated */
        uint32_t tag = 0;
        if (getrandom(&tag, sizeof tag, 0) != sizeof tag)
            return al_err(err, "sandbox", EIO, "no randomness for the token key");
        snprintf(tmp, sizeof tmp, "%s.%d.%08x", path, (int)getpid(), tag);
        _cleanup_close_ int w = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (w < 0 || write(w, fresh, sizeof fresh) != sizeof fresh || fsync(w) < 0) {
            unlink(tmp);
            return al_err(err, "sandbox", EIO, "cannot write %s", tmp);
        }
        if (link(tmp, path) < 0 && errno != EEXIST) {
            unlink(tmp);
            return al_err(err, "sandbox", errno, "cannot make %s: %m", path);
        }
        unlink(tmp);
    }
    return -EIO;
}

int al_sandbox_token(al_service *s, const char *id, char token[72], al_error *err) {
    uint8_t key[32], mac[SHA256_DIGEST_SIZE];
    int r = token_key(s, key, err);
    if (r < 0)
        return r;
    struct hmac_sha256_ctx h;
    hmac_sha256_set_key(&h, sizeof key, key);
    hmac_sha256_update(&h, strlen(id), (const uint8_t *)id);
    hmac_sha256_digest(&h, sizeof mac, mac);
    al_hex(mac, sizeof mac, token);
    return 0;
}

int al_sandbox_owner_check(const al_sandbox *sb, const al_principal *p, al_error *err) {
    if (strcmp(sb->owner.person_id, p->person_id) == 0)
        return 0;
    return al_err(err, "sandbox", EPERM,
                  "sandbox %s was made by another person of the workspace: only they are given its access token "
                  "(its commands run as them: their approvals, credits and audit)",
                  sb->id);
}

/* ------------------------------------------------------------ the sandbox plane */

int al_sandbox_admit(al_service *s, const char *id, const char *token, al_sandbox *out, al_error *err) {
    memset(out, 0, sizeof *out);
    if (!id || strlen(id) >= sizeof out->id)
        return al_err(err, "sandbox", ENOENT, "no such sandbox");
    al_store_sandbox b = { 0 };
    int r = al_store_sandbox_get(s->store, NULL, id, true, &b, err);
    if (r == -ENOENT)
        return al_err(err, "sandbox", ENOENT, "sandbox %s is not running: it was killed, ended, or its key revoked",
                      id);
    if (r < 0)
        return r;
    char hex[65], now[40];
    bool ok = token && strlen(token) <= 128;
    if (ok) {
        al_sha256_hex(token, strlen(token), hex);
        /* every byte compared, so the time says nothing of the hash */
        unsigned diff = 0;
        for (size_t i = 0; i < 64; i++)
            diff |= (unsigned)(hex[i] ^ b.token_hash[i]);
        ok = diff == 0 && strlen(b.token_hash) == 64;
    }
    al_store_now(now, sizeof now);
    if (!ok)
        r = al_err(err, "sandbox", EACCES, token ? "the access token (X-Access-Token) is not this sandbox's"
                                                 : "the sandbox's access token (X-Access-Token) is required");
    else if (strcmp(b.end_at, now) <= 0)
        r = al_err(err, "sandbox", ENOENT, "sandbox %s has ended (its timeout passed)", id);
    else if (strcmp(b.state, "paused") == 0)
        r = al_err(err, "sandbox", ENOENT, "sandbox %s is paused: Sandbox.connect resumes it", id);
    else
        r = al_sandbox_from_store(&b, out, err);
    al_store_sandbox_done(&b);
    return r;
}
