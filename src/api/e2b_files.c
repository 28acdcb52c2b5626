/*
 * E2B's sandbox plane, the part that is files (routes.c, sandbox_routes):
 * envd's GET /health, GET and POST /files (multipart uploads, as envd 0.4
 * takes them) and the filesystem.Filesystem unary RPCs over Connect's JSON
 * codec. Every path goes through al_sandbox_path (only /home/user = /work
 * and /out are kept) and every file operation through the core's
 * sandbox_fs.c, which never follows a link.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "e2b.h"
#include "e2b_run.h"
#include "handlers.h"
#include "reply.h"
#include "route.h"
#include "../core/sandbox.h"
#include "../core/views.h"

/* files one upload may carry */
#define UPLOAD_PARTS_MAX 64

enum MHD_Result al_e2b_health(al_route_ctx *x) { return al_reply_empty(x->c, 204, NULL, NULL); }

enum MHD_Result al_e2b_sandbox_unknown(al_route_ctx *x) {
    /* a Connect client says so (Connect-Protocol-Version), and reads Connect's errors */
    if (MHD_lookup_connection_value(x->c, MHD_HEADER_KIND, "Connect-Protocol-Version"))
        return al_e2b_connect_error(x->c, "unimplemented", "no such method in airlock's envd");
    return al_e2b_reply_error(x->c, 404, "no such path in airlock's sandbox plane (envd: /health, /files, "
                                         "/filesystem.Filesystem/*, /process.Process/*; the code interpreter: /execute)");
}

/* The prefix a client's PATH named ROOT by, for the paths answered back:
 * /out, /work when it said /work, else /home/user. */
static const char *prefix_of(const char *path, al_sandbox_root root) {
    if (root == AL_SANDBOX_OUT)
        return "/out";
    return path && strncmp(path, "/work", 5) == 0 && (path[5] == '/' || !path[5]) ? "/work" : "/home/user";
}

static json_t *path_json(const char *prefix, const char *rel) {
    char *p = NULL;
    if (asprintf(&p, "%s%s%s", prefix, rel[0] ? "/" : "", rel) < 0)
        return json_string("");
    json_t *v = json_string(p);
    free(p);
    return v ? v : json_string("");
}

/* ------------------------------------------------------------ GET /files */

enum MHD_Result al_e2b_files_get(al_route_ctx *x) {
    const char *path = MHD_lookup_connection_value(x->c, MHD_GET_ARGUMENT_KIND, "path");
    al_sandbox_root root;
    char rel[1024];
    al_error err = { 0 };
    int r = al_sandbox_path(path, &root, rel, sizeof rel, &err);
    int fd = -1;
    uint64_t size = 0;
    if (r == 0)
        r = al_sandbox_fs_open(x->s, x->sb, root, rel, &fd, &size, &err);
    if (r < 0)
        return al_e2b_reply_error(x->c, r == -ENOENT ? 404 : r == -EIO ? 500 : r == -EBUSY ? 409 : 400, "%s", err.msg);
    struct MHD_Response *resp = MHD_create_response_from_fd64(size, fd);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(x->c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ------------------------------------------------------------ POST /files */

typedef struct part {
    char *filename;
    char *data;
    size_t len;
} part;

typedef struct upload {
    part v[UPLOAD_PARTS_MAX];
    size_t n;
    bool too_many;
} upload;

/* libmicrohttpd's post processor hands each part's bytes in pieces (OFF
 * 0 first); a part named "file" is one file, its filename its path. */
static enum MHD_Result upload_part(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                                   const char *content_type, const char *transfer_encoding, const char *data,
                                   uint64_t off, size_t size) {
    (void)kind, (void)content_type, (void)transfer_encoding;
    upload *u = cls;
    if (!key || strcmp(key, "file") != 0)
        return MHD_YES;
    if (off == 0) {
        if (u->n == UPLOAD_PARTS_MAX) {
            u->too_many = true;
            return MHD_NO;
        }
        part *p = &u->v[u->n++];
        if (!(p->filename = strdup(filename ? filename : "")))
            return MHD_NO;
    }
    if (!u->n || !size)
        return MHD_YES;
    part *p = &u->v[u->n - 1];
    char *nd = realloc(p->data, p->len + size);
    if (!nd)
        return MHD_NO;
    memcpy(nd + p->len, data, size);
    p->data = nd;
    p->len += size;
    return MHD_YES;
}

static void upload_free(upload *u) {
    for (size_t i = 0; i < u->n; i++) {
        free(u->v[i].filename);
        free(u->v[i].data);
    }
    u->n = 0;
}

/* The request's body (multipart/form-data) into U: 0, or -EINVAL with the
 * reason queued in *RET. */
static int read_upload(al_route_ctx *x, upload *u, enum MHD_Result *ret) {
    const char *ct = MHD_lookup_connection_value(x->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0) {
        *ret = al_e2b_reply_error(x->c, 400, "the body must be multipart/form-data with a part named \"file\" (envd "
                                             "0.4.0 takes no other upload)");
        return -EINVAL;
    }
    struct MHD_PostProcessor *pp = MHD_create_post_processor(x->c, 64 * 1024, upload_part, u);
    if (!pp) {
        *ret = al_e2b_reply_error(x->c, 400, "the multipart body has no boundary");
        return -EINVAL;
    }
    enum MHD_Result ok = x->rq->len ? MHD_post_process(pp, x->rq->body, x->rq->len) : MHD_YES;
    if (MHD_destroy_post_processor(pp) != MHD_YES)
        ok = MHD_NO;
    if (ok != MHD_YES || u->n == 0) {
        *ret = u->too_many ? al_e2b_reply_error(x->c, 400, "at most %d files in one upload", UPLOAD_PARTS_MAX)
                           : al_e2b_reply_error(x->c, 400, "the multipart body is malformed, or has no part named "
                                                           "\"file\"");
        return -EINVAL;
    }
    return 0;
}

enum MHD_Result al_e2b_files_post(al_route_ctx *x) {
    if (x->rq->too_large)
        /* the service's one cap on a request's body, not the sandbox's
         * (which said 64 MiB of a 9 MiB upload that this refused) */
        return al_e2b_reply_error(x->c, 413,
                                  "the upload is larger than %llu MiB, the most one request may carry: write larger "
                                  "files in parts, or make them in a command",
                                  (unsigned long long)(al_view_config(x->s)->body_max >> 20));
    const char *path = MHD_lookup_connection_value(x->c, MHD_GET_ARGUMENT_KIND, "path");
    upload u = { 0 };
    enum MHD_Result ret = MHD_NO;
    if (read_upload(x, &u, &ret) < 0) {
        upload_free(&u);
        return ret;
    }
    json_t *out = json_array();
    for (size_t i = 0; i < u.n; i++) {
        /* one file to ?path=, else each part's filename is its path */
        const char *want = path && u.n == 1 ? path : u.v[i].filename;
        al_sandbox_root root;
        char rel[1024];
        al_error err = { 0 };
        int r = al_sandbox_path(want, &root, rel, sizeof rel, &err);
        if (r == 0 && !rel[0])
            r = al_err(&err, "files", EISDIR, "%s: is a directory", want);
        if (r == 0)
            r = al_sandbox_fs_write(x->s, x->sb, root, rel, u.v[i].data ? u.v[i].data : "", u.v[i].len, &err);
        if (r < 0) {
            json_decref(out);
            upload_free(&u);
            /* envd's: 507 is the SDK's NotEnoughSpaceError */
            return al_e2b_reply_error(x->c, r == -EDQUOT ? 507 : r == -EIO ? 500 : r == -EBUSY ? 409 : 400, "%s", err.msg);
        }
        const char *base = strrchr(rel, '/');
        json_array_append_new(out, json_pack("{s:s, s:s, s:o}", "name", base ? base + 1 : rel, "type", "file", "path",
                                             path_json(prefix_of(want, root), rel)));
    }
    upload_free(&u);
    return al_reply_json(x->c, 200, out);
}

/* ------------------------------------------------------------ filesystem.Filesystem */

/* E as envd's EntryInfo (protobuf-es JSON), under the client's PREFIX. */
static json_t *entry_json(const al_sandbox_entry *e, const char *prefix) {
    char perms[11] = "----------", size[24], mtime[40];
    perms[0] = e->dir ? 'd' : e->link ? 'l' : '-';
    for (int i = 0; i < 9; i++)
        if (e->mode & (0400 >> i))
            perms[1 + i] = "rwxrwxrwx"[i];
    snprintf(size, sizeof size, "%llu", (unsigned long long)e->size);
    time_t t = (time_t)e->mtime;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(mtime, sizeof mtime, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const char *base = strrchr(e->rel, '/');
    const char *name = e->rel[0] ? (base ? base + 1 : e->rel) : strrchr(prefix, '/') + 1;
    return json_pack("{s:s, s:s, s:o, s:s, s:i, s:s, s:s, s:s, s:s}", "name", name, "type",
                     e->dir ? "FILE_TYPE_DIRECTORY" : e->link ? "FILE_TYPE_SYMLINK" : "FILE_TYPE_FILE", "path",
                     path_json(prefix, e->rel), "size", size, "mode", (int)e->mode, "permissions", perms, "owner",
                     "user", "group", "user", "modifiedTime", mtime);
}

/* FIELD of the request BODY as a sandbox path: 0, or a Connect error queued. */
static int rpc_path(al_route_ctx *x, json_t *body, const char *field, al_sandbox_root *root, char rel[1024],
                    const char **named, enum MHD_Result *ret) {
    const char *p = json_string_value(json_object_get(body, field));
    al_error err = { 0 };
    *named = p;
    if (!p) {
        *ret = al_e2b_connect_error(x->c, "invalid_argument", "%s: a path is required", field);
        return -EINVAL;
    }
    if (al_sandbox_path(p, root, rel, 1024, &err) < 0) {
        *ret = al_e2b_connect_error(x->c, "invalid_argument", "%s", err.msg);
        return -EINVAL;
    }
    return 0;
}

static enum MHD_Result rpc_fail(al_route_ctx *x, int r, const al_error *err) {
    return al_e2b_connect_error(x->c, al_e2b_connect_code(r), "%s", err->msg[0] ? err->msg : "failed");
}

/* Stat, MakeDir: {"entry"} of PATH. */
static enum MHD_Result rpc_entry(al_route_ctx *x, const al_sandbox *sb, al_sandbox_root root, const char *rel,
                                 const char *named) {
    al_sandbox_entry e;
    al_error err = { 0 };
    int r = al_sandbox_fs_stat(x->s, sb, root, rel, &e, &err);
    if (r < 0)
        return rpc_fail(x, r, &err);
    return al_reply_json(x->c, 200, json_pack("{s:o}", "entry", entry_json(&e, prefix_of(named, root))));
}

static enum MHD_Result rpc_list(al_route_ctx *x, json_t *body, al_sandbox_root root, const char *rel,
                                const char *named) {
    json_t *d = json_object_get(body, "depth");
    json_int_t depth = json_is_integer(d) ? json_integer_value(d) : 1;
    al_sandbox_entries l;
    al_error err = { 0 };
    int r = al_sandbox_fs_list(x->s, x->sb, root, rel, depth ? (int)depth : 1, &l, &err);
    if (r < 0)
        return rpc_fail(x, r, &err);
    json_t *entries = json_array();
    for (size_t i = 0; i < l.n; i++)
        json_array_append_new(entries, entry_json(&l.v[i], prefix_of(named, root)));
    al_sandbox_entries_free(&l);
    return al_reply_json(x->c, 200, json_pack("{s:o}", "entries", entries));
}

static enum MHD_Result rpc_move(al_route_ctx *x, json_t *body) {
    al_sandbox_root fr, tr;
    char from[1024], to[1024];
    const char *fnamed, *tnamed;
    enum MHD_Result ret = MHD_NO;
    if (rpc_path(x, body, "source", &fr, from, &fnamed, &ret) < 0 ||
        rpc_path(x, body, "destination", &tr, to, &tnamed, &ret) < 0)
        return ret;
    al_error err = { 0 };
    int r = al_sandbox_fs_move(x->s, x->sb, fr, from, tr, to, &err);
    return r < 0 ? rpc_fail(x, r, &err) : rpc_entry(x, x->sb, tr, to, tnamed);
}

enum MHD_Result al_e2b_filesystem(al_route_ctx *x) {
    const char *m = x->arg[0];
#define NO_WATCH                                                                                                      \
    "watching a directory is not served: an airlock sandbox runs nothing between commands, so nothing changes its " \
    "files but the commands and this API"
    /* WatchDir is a server stream: its error goes in an end-stream frame,
     * else the SDK shows only "HTTP 501" */
    if (strcmp(m, "WatchDir") == 0)
        return al_e2b_stream_error(x->c, AL_CONNECT_UNIMPLEMENTED, NO_WATCH);
    if (strcmp(m, "CreateWatcher") == 0 || strcmp(m, "GetWatcherEvents") == 0 || strcmp(m, "RemoveWatcher") == 0)
        return al_e2b_connect_error(x->c, "unimplemented", "%s", NO_WATCH);
#undef NO_WATCH
    const char *ct = MHD_lookup_connection_value(x->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct || strncmp(ct, "application/json", 16) != 0)
        return al_e2b_connect_error(x->c, "invalid_argument", "airlock's envd speaks Connect's JSON codec only "
                                                              "(Content-Type: application/json)");
    if (x->rq->too_large)
        return al_e2b_connect_error(x->c, "resource_exhausted", "the request is too large");
    json_t *body = al_req_body_object(x->rq);
    if (!json_is_object(body)) {
        json_decref(body);
        return al_e2b_connect_error(x->c, "invalid_argument", "the body must be a JSON object");
    }
    enum MHD_Result ret = MHD_NO;
    al_sandbox_root root;
    char rel[1024];
    const char *named = NULL;
    al_error err = { 0 };
    int r;
    if (strcmp(m, "Move") == 0)
        ret = rpc_move(x, body);
    else if (strcmp(m, "Stat") != 0 && strcmp(m, "ListDir") != 0 && strcmp(m, "MakeDir") != 0 &&
             strcmp(m, "Remove") != 0)
        ret = al_e2b_connect_error(x->c, "unimplemented", "filesystem.Filesystem/%.64s: no such method", m);
    else if (rpc_path(x, body, "path", &root, rel, &named, &ret) < 0)
        ;
    else if (strcmp(m, "Stat") == 0)
        ret = rpc_entry(x, x->sb, root, rel, named);
    else if (strcmp(m, "ListDir") == 0)
        ret = rpc_list(x, body, root, rel, named);
    else if (strcmp(m, "MakeDir") == 0)
        ret = (r = al_sandbox_fs_mkdir(x->s, x->sb, root, rel, &err)) < 0 ? rpc_fail(x, r, &err)
                                                                          : rpc_entry(x, x->sb, root, rel, named);
    else
        ret = (r = al_sandbox_fs_remove(x->s, x->sb, root, rel, &err)) < 0 ? rpc_fail(x, r, &err)
                                                                           : al_reply_json(x->c, 200, json_object());
    json_decref(body);
    return ret;
}
