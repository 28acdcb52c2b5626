/*
 * The web console's files (web/, built into the binary by
 * scripts/console_assets.py): the shell at / and /login, its scripts,
 * styles and the code view's highlight.js under /assets/. Only what the
 * build embedded is ever answered: nothing is read from disk, so a name a
 * client sends can reach no file. Every answer carries the console's
 * headers: a Content-Security-Policy that admits only this origin's
 * scripts and styles (no inline script or style, no framing), no
 * sniffing, no referrer.
 *
 * The assets change with the binary, not with their names: they are
 * answered with Cache-Control: no-cache and an ETag (a hash of the bytes),
 * so a browser revalidates each and is told 304 while the build is the
 * same. ES modules import each other by plain names, which hashed names
 * would have to rewrite.
 */
#include <stdio.h>
#include <string.h>

#include "console_assets.h"
#include "handlers.h"
#include "reply.h"
#include "route.h"

#define CSP                                                                                                        \
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; connect-src 'self'; " \
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

static void console_headers(struct MHD_Response *r) {
    MHD_add_response_header(r, "Content-Security-Policy", CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
}

static const al_console_file *find(const char *name) {
    for (size_t i = 0; i < ELEMENTSOF(al_console_files); i++)
        if (strcmp(al_console_files[i].name, name) == 0)
            return &al_console_files[i];
    return NULL;
}

/* Whether the request's If-None-Match names ETAG (a list, or *). */
static bool not_modified(struct MHD_Connection *c, const char *etag) {
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    if (!inm)
        return false;
    if (strcmp(inm, "*") == 0)
        return true;
    size_t l = strlen(etag);
    for (const char *p = strstr(inm, etag); p; p = strstr(p + 1, etag)) {
        /* a whole entry (not a prefix of a longer tag); W/ is the same for us */
        char after = p[l];
        if (after == '\0' || after == ',' || after == ' ')
            return true;
    }
    return false;
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, const char *type, const char *data,
                              size_t len, const char *etag) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    console_headers(r);
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    if (etag)
        MHD_add_response_header(r, "ETag", etag);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result serve(al_route_ctx *x, const char *name) {
    const al_console_file *f = find(name);
    if (!f) {
        static const char nf[] = "{\"error\":{\"code\":\"not_found\",\"message\":\"no such file of the console\"}}";
        return answer(x->c, 404, "application/json", nf, sizeof nf - 1, NULL);
    }
    if (not_modified(x->c, f->etag))
        return answer(x->c, 304, f->type, "", 0, f->etag);
    return answer(x->c, 200, f->type, f->data, f->len, f->etag);
}

/* GET / and GET /login: the shell (the page reads its hash route, and at
 * /login the link's #token=, which no server ever sees) */
enum MHD_Result al_console_shell(al_route_ctx *x) { return serve(x, "index.html"); }

/* GET /assets/{file} */
enum MHD_Result al_console_asset(al_route_ctx *x) {
    /* index.html is the shell's, answered at / only (one address per page) */
    return strcmp(x->arg[0], "index.html") == 0 ? serve(x, "") : serve(x, x->arg[0]);
}

/* GET /assets/pages/{file}: a page's module (web/pages/) */
enum MHD_Result al_console_page(al_route_ctx *x) {
    char name[AL_ROUTE_SEG_MAX + 8];
    snprintf(name, sizeof name, "pages/%s", x->arg[0]);
    return serve(x, name);
}
