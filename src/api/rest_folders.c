/*
 * REST: the workspace's connected folders (core/folders.h), read-only.
 *   GET /v1/folders                         {folders: [{name, glob, created_at}]}
 *                                           (the host path too, for an admin)
 *   GET /v1/folders/{name}/entries?path=SUB a directory's entries
 * A run imports from them with its body's "folders" (run_body.c).
 */
#include <microhttpd.h>
#include <string.h>

#include "handlers.h"
#include "reply.h"
#include "route.h"
#include "../core/views.h"

enum MHD_Result al_rest_folders(al_route_ctx *x) {
    enum MHD_Result bad;
    if (!al_req_query_ok(x->c, NULL, 0, &bad))
        return bad;
    al_error err = { 0 };
    /* the host's path is the operator's business: a workspace's admin sees
     * it, an agent's key (a member) never */
    json_t *doc = al_view_folders(x->s, x->p, al_req_is_admin(x->p), &err);
    if (!doc)
        return al_reply_error(x->c, 500, "internal", "%s", err.msg[0] ? err.msg : "cannot list the folders");
    return al_reply_json(x->c, 200, doc);
}

enum MHD_Result al_rest_folder_entries(al_route_ctx *x) {
    static const char *const q[] = { "path" };
    enum MHD_Result bad;
    if (!al_req_query_ok(x->c, q, ELEMENTSOF(q), &bad))
        return bad;
    const char *sub = MHD_lookup_connection_value(x->c, MHD_GET_ARGUMENT_KIND, "path");
    al_error err = { 0 };
    json_t *doc = al_view_folder_entries(x->s, x->p, x->arg[0], sub ? sub : "", &err);
    if (doc)
        return al_reply_json(x->c, 200, doc);
    if (err.err == ENOENT)
        return al_reply_error(x->c, 404, "not_found", "%s", err.msg);
    if (err.err == EINVAL || err.err == ELOOP || err.err == EXDEV || err.err == ENOTDIR)
        return al_reply_error(x->c, 400, "bad_request", "%s", err.msg);
    if (err.err == ESTALE)
        return al_reply_error(x->c, 409, "folder_changed", "%s", err.msg);
    return al_reply_error(x->c, 500, "internal", "%s", err.msg[0] ? err.msg : "cannot list the folder");
}
