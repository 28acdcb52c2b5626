/* REST: one artifact, its document (GET /v1/artifacts/{id}) and its bytes
 * (GET /v1/artifacts/{id}/content), as hostile content a browser never
 * renders inline. */
#include <sys/stat.h>
#include <unistd.h>

#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "../core/views.h"

static enum MHD_Result artifact(al_route_ctx *x, bool content) {
    struct MHD_Connection *c = x->c;
    const char *id = x->arg[0];
    json_t *a = al_view_artifact(x->s, x->p->workspace_id, id);
    if (!a)
        return al_reply_error(c, 404, "not_found", "no artifact %s", id);
    if (!content)
        return al_reply_json(c, 200, a);
    int fd = al_blob_open(x->s, json_string_value(json_object_get(a, "sha256")),
                          json_integer_value(json_object_get(a, "size")));
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        if (fd >= 0)
            close(fd);
        json_decref(a);
        return al_reply_error(c, 500, "internal", "the artifact's content is missing from the store");
    }
    struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
    MHD_add_response_header(r, "Content-Type", json_string_value(json_object_get(a, "content_type")));
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    /* never rendered inline by a browser: it is the box's output */
    MHD_add_response_header(r, "Content-Disposition", "attachment");
    MHD_add_response_header(r, "Content-Security-Policy", "sandbox");
    json_decref(a);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result al_rest_artifact_get(al_route_ctx *x) { return artifact(x, false); }
enum MHD_Result al_rest_artifact_content(al_route_ctx *x) { return artifact(x, true); }
