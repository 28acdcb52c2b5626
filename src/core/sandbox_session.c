/* The E2B session box's channel, the service's side (sandbox_session.h). */
#include "sandbox_session.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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
    static const char *const keys[] = { "exit", "timed_out", "error" };
    json_t *ex = json_object_get(doc, "exit"), *to = json_object_get(doc, "timed_out");
    json_t *e = json_object_get(doc, "error");
    int r = 1;
    if (!json_is_object(doc) || al_json_unknown_key(doc, keys, ELEMENTSOF(keys)) || !json_is_integer(ex) ||
        json_integer_value(ex) < -1 || json_integer_value(ex) > 255 || !json_is_boolean(to) ||
        (e && !json_is_string(e)))
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
