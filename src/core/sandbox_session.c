/* The E2B session box's channel, the service's side (sandbox_session.h). */
#include "sandbox_session.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* what one read of the log takes at most (lines past it wait for the next) */
#define FOLLOW_READ (256u << 10)

bool al_session_call_valid(const char *call) {
    size_t n = call ? strlen(call) : 0;
    return n >= 1 && n <= 63 && strspn(call, "abcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

/* REL beneath CHAN, no link, no other mount; a file of the box's must be
 * regular: O_NONBLOCK so that a FIFO planted there opens without waiting
 * and is then refused by its type. */
static int open_box_file(int chan, const char *rel, al_error *err) {
    struct open_how how = { .flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
                                       RESOLVE_NO_XDEV };
    long fd = syscall(SYS_openat2, chan, rel, &how, sizeof how);
    if (fd < 0)
        return errno == ENOENT ? -ENOENT : al_err(err, "session", errno, "the session box's %s cannot be opened "
                                                  "beneath its channel: %m", rel);
    struct stat st;
    if (fstat((int)fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close((int)fd);
        return al_err(err, "session", EINVAL, "the session box's %s is not a regular file", rel);
    }
    return (int)fd;
}

int al_session_submit(int chan, const char *call, json_t *req, al_error *err) {
    if (!al_session_call_valid(call))
        return al_err(err, "session", EINVAL, "not a call id: want 1-63 of [a-z0-9_]");
    _cleanup_free_ char *text = json_dumps(req, JSON_COMPACT);
    if (!text)
        return al_err(err, "session", ENOMEM, "the request cannot be written as JSON");
    if (strlen(text) > AL_SESSION_REQ_MAX)
        return al_err(err, "session", E2BIG, "the request is over %u bytes", AL_SESSION_REQ_MAX);
    struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
                                       RESOLVE_NO_XDEV };
    long dir = syscall(SYS_openat2, chan, "req", &how, sizeof how);
    if (dir < 0)
        return al_err(err, "session", errno, "the session's req/ cannot be opened: %m");
    char tmp[80], name[80];
    snprintf(tmp, sizeof tmp, ".%s.tmp", call);
    snprintf(name, sizeof name, "%s.json", call);
    int r = 0;
    struct stat st;
    if (fstatat((int)dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        r = al_err(err, "session", EEXIST, "call %s was submitted already", call);
        goto out;
    }
    int fd = openat((int)dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        r = al_err(err, "session", errno, "cannot write the request of %s: %m", call);
        goto out;
    }
    r = al_write_all(fd, text, strlen(text));
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && renameat((int)dir, tmp, (int)dir, name) < 0)
        r = -errno;
    if (r < 0) {
        unlinkat((int)dir, tmp, 0);
        al_err(err, "session", -r, "cannot write the request of %s: %s", call, strerror(-r));
    }
out:
    close((int)dir);
    return r;
}

/* The whole lines of BUF (LEN bytes), each an output event given to FN;
 * *USED the bytes they took. */
static int lines(const char *buf, size_t len, size_t *used, al_session_chunk_fn fn, void *ud, al_error *err) {
    size_t at = 0;
    int r = 0;
    while (r == 0 && at < len) {
        const char *nl = memchr(buf + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (buf + at)) : len - at;
        if (n > AL_SESSION_LINE_MAX)
            return al_err(err, "session", EBADMSG, "the session box wrote an output line over %u bytes",
                          AL_SESSION_LINE_MAX);
        if (!nl)
            break;                /* its newline is still to come */
        al_helper_event ev;
        al_helper_event_kind k = al_helper_event_parse(buf + at, n, &ev);
        if (k != AL_HELPER_EVENT_STDOUT && k != AL_HELPER_EVENT_STDERR)
            r = al_err(err, "session", EBADMSG, "the session box wrote a line that is not an output event");
        else
            r = fn(ud, &ev);
        al_helper_event_clear(&ev);
        if (r == 0)
            at += n + 1;
    }
    *used = at;
    return r;
}

int al_session_follow(int chan, const char *call, uint64_t *off, al_session_chunk_fn fn, void *ud, al_error *err) {
    if (!al_session_call_valid(call))
        return al_err(err, "session", EINVAL, "not a call id: want 1-63 of [a-z0-9_]");
    char rel[96];
    snprintf(rel, sizeof rel, "out/%s.log", call);
    _cleanup_close_ int fd = open_box_file(chan, rel, err);
    if (fd == -ENOENT)
        return 0;
    if (fd < 0)
        return fd;
    _cleanup_free_ char *buf = malloc(FOLLOW_READ);
    if (!buf)
        return al_err(err, "session", ENOMEM, "out of memory");
    for (;;) {
        if (*off >= AL_SESSION_LOG_MAX)
            return al_err(err, "session", EFBIG, "the session box's output of %s is over %u bytes", call,
                          AL_SESSION_LOG_MAX);
        ssize_t got = pread(fd, buf, FOLLOW_READ, (off_t)*off);
        if (got < 0)
            return al_err(err, "session", errno, "cannot read the session box's output of %s: %m", call);
        size_t used = 0;
        int r = lines(buf, (size_t)got, &used, fn, ud, err);
        *off += used;
        /* a line over the cap is caught above; a partial one shorter than
         * it waits, as does the end of what is there */
        if (r < 0 || used == 0)
            return r;
    }
}

/* DOC is an end as the agent writes it: {"exit": -1..255, "timed_out":
 * bool, "error"?: string}. */
static bool end_valid(json_t *doc) {
    static const char *const keys[] = { "exit", "timed_out", "error" };
    json_t *ex = json_object_get(doc, "exit"), *to = json_object_get(doc, "timed_out");
    json_t *e = json_object_get(doc, "error");
    return json_is_object(doc) && !al_json_unknown_key(doc, keys, ELEMENTSOF(keys)) && json_is_integer(ex) &&
           json_integer_value(ex) >= -1 && json_integer_value(ex) <= 255 && json_is_boolean(to) &&
           (!e || json_is_string(e));
}

int al_session_end_read(int chan, const char *call, al_session_end *end, al_error *err) {
    *end = (al_session_end){ 0 };
    if (!al_session_call_valid(call))
        return al_err(err, "session", EINVAL, "not a call id: want 1-63 of [a-z0-9_]");
    char rel[96];
    snprintf(rel, sizeof rel, "out/%s.end", call);
    _cleanup_close_ int fd = open_box_file(chan, rel, err);
    if (fd == -ENOENT)
        return 0;
    if (fd < 0)
        return fd;
    char buf[AL_SESSION_END_MAX + 1];
    ssize_t got = read(fd, buf, sizeof buf);
    if (got < 0)
        return al_err(err, "session", errno, "cannot read the end of %s: %m", call);
    if ((size_t)got > AL_SESSION_END_MAX)
        return al_err(err, "session", EBADMSG, "the session box's end of %s is over %u bytes", call,
                      AL_SESSION_END_MAX);
    json_t *doc = json_loadb(buf, (size_t)got, 0, NULL);
    json_t *ex = json_object_get(doc, "exit"), *to = json_object_get(doc, "timed_out");
    json_t *e = json_object_get(doc, "error");
    int r = 1;
    if (!end_valid(doc))
        r = al_err(err, "session", EBADMSG, "the session box's end of %s is not {\"exit\": -1..255, "
                   "\"timed_out\": bool, \"error\"?: string}", call);
    else {
        end->exit_code = (int)json_integer_value(ex);
        end->timed_out = json_is_true(to);
        snprintf(end->error, sizeof end->error, "%s", e ? json_string_value(e) : "");
    }
    json_decref(doc);
    return r;
}

/* ------------------------------------------------------------- the relay */

void al_session_relay_init(al_session_relay *r, int chan) {
    *r = (al_session_relay){ .chan = chan };
}

void al_session_relay_clear(al_session_relay *r) {
    free(r->part);
    r->part = NULL;
    r->part_len = 0;
    r->n_calls = 0;
}

/* REL beneath CHAN, as the service writes it: FLAGS, never through a link
 * or into another mount; O_NONBLOCK so that a FIFO there cannot hold the
 * relay (and is then refused by its type). */
static int open_beneath(int chan, const char *rel, int flags, al_error *err) {
    /* openat2 is strict: a mode with O_CREAT only, O_PATH with no O_NONBLOCK */
    int nb = (flags & O_PATH) ? 0 : O_NONBLOCK;
    struct open_how how = { .flags = (uint64_t)(flags | nb | O_CLOEXEC | O_NOFOLLOW),
                            .mode = (flags & O_CREAT) ? 0644 : 0,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
                                       RESOLVE_NO_XDEV };
    long fd = syscall(SYS_openat2, chan, rel, &how, sizeof how);
    if (fd < 0)
        return al_err(err, "session", errno, "the session's %s cannot be opened beneath its channel: %m", rel);
    struct stat st;
    if (!(flags & O_DIRECTORY) && (fstat((int)fd, &st) < 0 || !S_ISREG(st.st_mode))) {
        close((int)fd);
        return al_err(err, "session", EINVAL, "the session's %s is not a regular file", rel);
    }
    return (int)fd;
}

/* CALL was submitted by the service: its request is in req/. */
static bool submitted(int chan, const char *call) {
    char rel[96];
    snprintf(rel, sizeof rel, "req/%s.json", call);
    al_error e = { 0 };
    _cleanup_close_ int fd = open_beneath(chan, rel, O_RDONLY, &e);
    return fd >= 0;
}

/* The slot of CALL's pending output (made if new), or NULL: no room. */
static al_session_relay_call *slot(al_session_relay *r, const char *call) {
    for (size_t i = 0; i < r->n_calls; i++)
        if (strcmp(r->calls[i].call, call) == 0)
            return &r->calls[i];
    if (r->n_calls == AL_SESSION_CALLS_MAX)
        return NULL;
    al_session_relay_call *c = &r->calls[r->n_calls++];
    *c = (al_session_relay_call){ 0 };
    snprintf(c->call, sizeof c->call, "%s", call);
    return c;
}

static void forget(al_session_relay *r, const char *call) {
    for (size_t i = 0; i < r->n_calls; i++)
        if (strcmp(r->calls[i].call, call) == 0) {
            r->calls[i] = r->calls[--r->n_calls];
            return;
        }
}

static int relay_chunk(al_session_relay *r, const char *call, json_t *type, json_t *data, al_error *err) {
    const char *t = json_string_value(type);
    if (!t || (strcmp(t, "stdout") != 0 && strcmp(t, "stderr") != 0) || !json_is_string(data))
        return al_err(err, "session", EBADMSG, "the session box wrote an output line that is not "
                      "{\"call\", \"type\": \"stdout\"|\"stderr\", \"data_base64\"}");
    al_session_relay_call *c = slot(r, call);
    if (!c)
        return al_err(err, "session", EBADMSG, "the session box wrote output of more than %d calls at once",
                      AL_SESSION_CALLS_MAX);
    json_t *ev = json_pack("{s:O, s:O}", "type", type, "data_base64", data);
    _cleanup_free_ char *line = ev ? json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(ev);
    if (!line)
        return al_err(err, "session", ENOMEM, "out of memory");
    size_t n = strlen(line);
    line[n++] = '\n';             /* over the NUL: written by length */
    if (c->bytes + n > AL_SESSION_LOG_MAX)
        return 0;                 /* past the cap: dropped (the run stopped reading long before) */
    char rel[96];
    snprintf(rel, sizeof rel, "out/%s.log", call);
    _cleanup_close_ int fd = open_beneath(r->chan, rel, O_WRONLY | O_APPEND | O_CREAT, err);
    if (fd < 0)
        return fd;
    int w = al_write_all(fd, line, n);
    if (w < 0)
        return al_err(err, "session", -w, "cannot write the session's %s: %s", rel, strerror(-w));
    c->bytes += n;
    return 0;
}

static int relay_end(al_session_relay *r, const char *call, json_t *end, al_error *err) {
    if (!end_valid(end))
        return al_err(err, "session", EBADMSG, "the session box's end of %s is not {\"exit\": -1..255, "
                      "\"timed_out\": bool, \"error\"?: string}", call);
    _cleanup_free_ char *text = json_dumps(end, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text || strlen(text) > AL_SESSION_END_MAX)
        return al_err(err, "session", EBADMSG, "the session box's end of %s is over %u bytes", call,
                      AL_SESSION_END_MAX);
    _cleanup_close_ int dir = open_beneath(r->chan, "out", O_PATH | O_DIRECTORY, err);
    if (dir < 0)
        return dir;
    char tmp[96], name[96];
    snprintf(tmp, sizeof tmp, ".%s.end.tmp", call);
    snprintf(name, sizeof name, "%s.end", call);
    struct stat st;
    if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return al_err(err, "session", EBADMSG, "the session box ended call %s twice", call);
    int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0)
        return al_err(err, "session", errno, "cannot write the end of %s: %m", call);
    int w = al_write_all(fd, text, strlen(text));
    if (close(fd) < 0 && w == 0)
        w = -errno;
    if (w == 0 && renameat(dir, tmp, dir, name) < 0)
        w = -errno;
    if (w < 0) {
        unlinkat(dir, tmp, 0);
        return al_err(err, "session", -w, "cannot write the end of %s: %s", call, strerror(-w));
    }
    forget(r, call);
    return 0;
}

/* One whole line of the agent's (without its newline). */
static int relay_line(al_session_relay *r, const char *line, size_t n, al_error *err) {
    json_t *doc = json_loadb(line, n, JSON_REJECT_DUPLICATES, NULL);
    static const char *const chunk_keys[] = { "call", "type", "data_base64" };
    static const char *const end_keys[] = { "call", "end" };
    const char *call = json_string_value(json_object_get(doc, "call"));
    json_t *end = json_object_get(doc, "end");
    int rc;
    if (!json_is_object(doc) || !al_session_call_valid(call) ||
        al_json_unknown_key(doc, end ? end_keys : chunk_keys, end ? 2 : 3))
        rc = al_err(err, "session", EBADMSG, "the session box wrote a line that is not a call's output or end");
    else if (!submitted(r->chan, call))
        rc = 0;                   /* a call given up on (its files removed), or never submitted: dropped */
    else if (end)
        rc = relay_end(r, call, end, err);
    else
        rc = relay_chunk(r, call, json_object_get(doc, "type"), json_object_get(doc, "data_base64"), err);
    json_decref(doc);
    return rc;
}

int al_session_relay_feed(al_session_relay *r, const char *data, size_t n, al_error *err) {
    while (n) {
        const char *nl = memchr(data, '\n', n);
        size_t take = nl ? (size_t)(nl - data) : n;
        if (r->part_len + take > AL_SESSION_LINE_MAX)
            return al_err(err, "session", EBADMSG, "the session box wrote a line over %u bytes",
                          AL_SESSION_LINE_MAX);
        if (!nl || r->part_len) {
            char *p = realloc(r->part, r->part_len + take + 1);
            if (!p)
                return al_err(err, "session", ENOMEM, "out of memory");
            r->part = p;
            memcpy(r->part + r->part_len, data, take);
            r->part_len += take;
        }
        if (!nl)
            return 0;             /* its newline is still to come */
        int rc = r->part_len ? relay_line(r, r->part, r->part_len, err) : relay_line(r, data, take, err);
        r->part_len = 0;
        if (rc < 0)
            return rc;
        data += take + 1;
        n -= take + 1;
    }
    return 0;
}

int al_session_cancel(int chan, const char *call, al_error *err) {
    if (!al_session_call_valid(call))
        return al_err(err, "session", EINVAL, "not a call id: want 1-63 of [a-z0-9_]");
    char rel[96];
    snprintf(rel, sizeof rel, "req/%s.cancel", call);
    int fd = open_beneath(chan, rel, O_WRONLY | O_CREAT, err);
    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}

void al_session_forget(int chan, const char *call) {
    if (!al_session_call_valid(call))
        return;
    static const char *const files[][2] = { { "req", "json" }, { "req", "cancel" }, { "out", "log" },
                                            { "out", "end" } };
    for (size_t i = 0; i < ELEMENTSOF(files); i++) {
        char rel[96];
        snprintf(rel, sizeof rel, "%s/%s.%s", files[i][0], call, files[i][1]);
        unlinkat(chan, rel, 0);
    }
}

bool al_session_box_holds(const char *state_dir, const char *id) {
    char hp[PATH_MAX];
    struct stat st;
    if (snprintf(hp, sizeof hp, "%s/sandboxes/%s/session/holder", state_dir, id) >= (int)sizeof hp)
        return false;
    return lstat(hp, &st) == 0 && time(NULL) - st.st_mtime < AL_SESSION_HOLDER_STALE_S;
}
