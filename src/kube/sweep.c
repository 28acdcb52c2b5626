/* The sweep (kube.h's al_kube_sweep): the pods and Secrets a dead service
 * of this node left, found by their labels (node; instance not the live
 * one's), deleted. Filtered here rather than with a `!=` selector, so that
 * a list is one equality selector every server (and the double) serves. */
#include <errno.h>
#include <string.h>

#include "api.h"
#include "kube_int.h"

/* a list's page, at most: a Secret list carries each Secret's data (a
 * run's code and inputs, up to 1 MiB each), so an unpaged list of a few
 * leaked runs' Secrets would pass AL_KUBE_BODY_MAX and no sweep would ever
 * get through them */
#define PAGE 4
/* pages, at most, in one sweep (the next start sweeps again) */
#define PAGES_MAX 4096

/* the items of one page of DOC that are this node's other starts',
 * deleted: how many */
static int sweep_page(const al_kube_cluster *c, const char *kind, const json_t *doc, const char *node,
                      const char *instance, json_t *body) {
    int n = 0;
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(doc, "items"), i, item) {
        json_t *md = json_object_get(item, "metadata");
        json_t *labels = json_object_get(md, "labels");
        const char *name = json_string_value(json_object_get(md, "name"));
        const char *in = json_string_value(json_object_get(labels, "airlock.dev/instance"));
        const char *nd = json_string_value(json_object_get(labels, "airlock.dev/node"));
        /* the list is the server's word: each item is checked again */
        if (!name || strlen(name) >= AL_KUBE_NAME_MAX || strncmp(name, "airlock-", 8) != 0 || !nd ||
            strcmp(nd, node) != 0 || (in && strcmp(in, instance) == 0))
            continue;
        if (strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(name))
            continue;
        char p[512];
        snprintf(p, sizeof p, "/api/v1/namespaces/%s/%s/%s", c->namespace_, kind, name);
        long dc = 0;
        json_t *dd = NULL;
        al_error e = { 0 };
        if (al_kube_call(c, "DELETE", p, body, 15000, &dc, &dd, &e) == 0 && (dc == 200 || dc == 202))
            n++;
        json_decref(dd);
    }
    return n;
}

static int sweep_kind(const al_kube_cluster *c, const char *kind, const char *node, const char *instance,
                      al_error *err) {
    json_t *body = json_pack("{s:s, s:s, s:i, s:s}", "kind", "DeleteOptions", "apiVersion", "v1",
                             "gracePeriodSeconds", 0, "propagationPolicy", "Background");
    if (!body)
        return al_err(err, "sweep", ENOMEM, "out of memory");
    char cont[1024] = "";
    int n = 0, r = 0;
    for (int page = 0; page < PAGES_MAX; page++) {
        char path[2048];
        snprintf(path, sizeof path,
                 "/api/v1/namespaces/%s/%s?labelSelector=app.kubernetes.io%%2Fmanaged-by%%3Dairlock%%2C"
                 "airlock.dev%%2Fnode%%3D%s&limit=%d%s%s",
                 c->namespace_, kind, node, PAGE, cont[0] ? "&continue=" : "", cont);
        long code = 0;
        json_t *doc = NULL;
        if ((r = al_kube_call(c, "GET", path, NULL, 15000, &code, &doc, err)) < 0)
            break;
        if (code != 200) {
            const char *m = json_string_value(json_object_get(doc, "message"));
            r = al_err(err, "sweep", EIO, "list %s: %ld: %.200s", kind, code, m ? m : "");
            json_decref(doc);
            break;
        }
        n += sweep_page(c, kind, doc, node, instance, body);
        /* the server's token goes into our query as it is: only when it
         * cannot change it (a real one is base64url) */
        const char *next = json_string_value(json_object_get(json_object_get(doc, "metadata"), "continue"));
        size_t nl = next ? strlen(next) : 0;
        bool more = nl && nl < sizeof cont &&
                    strspn(next, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == nl;
        if (more)
            memcpy(cont, next, nl + 1);
        json_decref(doc);
        if (!more)
            break;
    }
    json_decref(body);
    return r < 0 ? r : n;
}

int al_kube_sweep(const al_kube_cluster *c, const char *node, const char *instance, al_error *err) {
    if (strspn(node, "0123456789abcdef") != strlen(node) || !*node)
        return al_err(err, "sweep", EINVAL, "a node label is hex");
    int a = sweep_kind(c, "pods", node, instance, err);
    if (a < 0)
        return a;
    int b = sweep_kind(c, "secrets", node, instance, err);
    return b < 0 ? b : a + b;
}

int al_kube_delete_run(const al_kube_cluster *c, const char *name, al_error *err) {
    size_t n = name ? strlen(name) : 0;
    if (n < 9 || n >= AL_KUBE_NAME_MAX || strncmp(name, "airlock-", 8) != 0 ||
        strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
        return al_err(err, "cleanup", EINVAL, "not a run's name");
    json_t *body = json_pack("{s:s, s:s, s:i, s:s}", "kind", "DeleteOptions", "apiVersion", "v1",
                             "gracePeriodSeconds", 0, "propagationPolicy", "Background");
    int r = 0;
    /* the pod first: its containers stop reading the Secret's volume */
    static const char *const kinds[] = { "pods", "secrets" };
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        char p[512];
        snprintf(p, sizeof p, "/api/v1/namespaces/%s/%s/%s", c->namespace_, kinds[i], name);
        long code = 0;
        json_t *doc = NULL;
        al_error e = { 0 };
        int k = al_kube_call(c, "DELETE", p, body, 15000, &code, &doc, &e);
        if (k < 0)
            r = al_err(err, "cleanup", -k, "delete %s %s: %s", kinds[i], name, e.msg);
        else if (code != 200 && code != 202 && code != 404)
            r = al_err(err, "cleanup", EIO, "delete %s %s: %ld", kinds[i], name, code);
        json_decref(doc);
    }
    json_decref(body);
    return r;
}
