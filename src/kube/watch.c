/* The watch on one pod (kube_int.h): the API server's newline-delimited
 * events, each line bounded, and a pod's state as the contract maps it
 * (how a run ends). Every byte is the API server's: hostile, bounded. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kube_int.h"

/* a waiting container's reasons that end the run as airlock's error
 * (provisioning, never charged): the kubelet would only retry them */
static const char *const broken_reasons[] = { "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                                              "CreateContainerConfigError", "CreateContainerError" };

static const char *str(const json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static const json_t *container(const json_t *statuses, const char *name) {
    size_t i;
    const json_t *c;
    json_array_foreach(statuses, i, c) if (strcmp(str(c, "name"), name) == 0) return c;
    return NULL;
}

/* a waiting reason of any container (main, or the collect sidecar: the
 * same image) that the kubelet only retries */
static bool broken(const json_t *status, al_kube_pod_state *st) {
    static const char *const lists[] = { "containerStatuses", "initContainerStatuses" };
    for (size_t l = 0; l < 2; l++) {
        size_t i;
        const json_t *c;
        json_array_foreach(json_object_get(status, lists[l]), i, c) {
            const json_t *w = json_object_get(json_object_get(c, "state"), "waiting");
            const char *reason = str(w, "reason");
            for (size_t k = 0; k < sizeof broken_reasons / sizeof *broken_reasons; k++)
                if (strcmp(reason, broken_reasons[k]) == 0) {
                    snprintf(st->why, sizeof st->why, "container %.40s: %s: %.300s", str(c, "name"), reason,
                             str(w, "message"));
                    return true;
                }
        }
    }
    return false;
}

static bool unschedulable(const json_t *status, al_kube_pod_state *st) {
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(status, "conditions"), i, c) {
        if (strcmp(str(c, "type"), "PodScheduled") == 0 && strcmp(str(c, "status"), "False") == 0 &&
            strcmp(str(c, "reason"), "Unschedulable") == 0) {
            snprintf(st->why, sizeof st->why, "the pod cannot be scheduled: %.340s", str(c, "message"));
            return true;
        }
    }
    return false;
}

/* RV (the server's, hostile) kept in ST->rv only when it fits and can go
 * into the watch's query string as it is: a '&' or a space in it would
 * change or break the query (a real resourceVersion is an opaque token of
 * URL-safe bytes, digits in practice) */
static void keep_rv(al_kube_pod_state *st, const char *rv) {
    size_t n = strlen(rv);
    if (n && n < sizeof st->rv &&
        strspn(rv, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_.~") == n)
        memcpy(st->rv, rv, n + 1);
}

void al_kube_pod_classify(const json_t *pod, al_kube_pod_state *st) {
    keep_rv(st, str(json_object_get(pod, "metadata"), "resourceVersion"));
    st->why[0] = '\0';
    st->deleting = json_is_string(json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp"));
    st->exit_code = -1;
    st->oom = false;
    const json_t *status = json_object_get(pod, "status");
    const char *phase = str(status, "phase");
    const json_t *main_ = container(json_object_get(status, "containerStatuses"), "main");
    const json_t *state = json_object_get(main_, "state");
    const json_t *term = json_object_get(state, "terminated");
    /* the backstop fired: the kubelet killed main too, which is timeout,
     * not main's own end */
    if (strcmp(phase, "Failed") == 0 && strcmp(str(status, "reason"), "DeadlineExceeded") == 0) {
        st->phase = AL_KPOD_DEADLINE;
        snprintf(st->why, sizeof st->why, "%.300s", str(status, "message"));
        return;
    }
    if (json_is_object(term)) {
        const json_t *jc = json_object_get(term, "exitCode");
        if (!json_is_integer(jc)) {
            /* json_integer_value would make it 0: a success the pod never
             * reported */
            st->phase = AL_KPOD_FAILED;
            snprintf(st->why, sizeof st->why, "the API server reported main terminated without an integer exitCode "
                     "(a broken or foreign API server: check the kubeconfig's server)");
            return;
        }
        json_int_t code = json_integer_value(jc);
        st->phase = AL_KPOD_DONE;
        st->exit_code = code < 0 || code > 255 ? 255 : (int)code;
        st->oom = strcmp(str(term, "reason"), "OOMKilled") == 0;
        snprintf(st->why, sizeof st->why, "%.60s", str(term, "reason"));
        return;
    }
    if (broken(status, st)) {
        st->phase = AL_KPOD_BROKEN;
        return;
    }
    if (strcmp(phase, "Failed") == 0) {
        st->phase = AL_KPOD_FAILED;
        snprintf(st->why, sizeof st->why, "the pod failed: %.60s: %.280s", str(status, "reason"),
                 str(status, "message"));
        return;
    }
    if (unschedulable(status, st)) {
        st->phase = AL_KPOD_UNSCHEDULABLE;
        return;
    }
    st->phase = json_is_object(json_object_get(state, "running")) ? AL_KPOD_RUNNING : AL_KPOD_PENDING;
}

/* one whole line: an event */
static int event(al_kube_watch *w, const char *line, size_t len) {
    if (len == 0)
        return 0;
    json_error_t je;
    json_t *doc = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    const char *type = json_string_value(json_object_get(doc, "type"));
    json_t *obj = json_object_get(doc, "object");
    if (!type || !json_is_object(obj)) {
        snprintf(w->why, sizeof w->why, "the watch sent a line that is not an event (%zu bytes)", len);
        json_decref(doc);
        return -EBADMSG;
    }
    al_kube_event ev;
    if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0) {
        al_kube_pod_classify(obj, &w->st);
        ev = AL_KEV_POD;
    } else if (strcmp(type, "DELETED") == 0) {
        /* its last state (main may have ended just before) stays in WHY */
        al_kube_pod_classify(obj, &w->st);
        ev = AL_KEV_DELETED;
    } else if (strcmp(type, "BOOKMARK") == 0) {
        keep_rv(&w->st, str(json_object_get(obj, "metadata"), "resourceVersion"));
        ev = AL_KEV_BOOKMARK;
    } else if (strcmp(type, "ERROR") == 0) {
        json_int_t code = json_integer_value(json_object_get(obj, "code"));
        ev = code == 410 ? AL_KEV_EXPIRED : AL_KEV_ERROR;
        snprintf(w->st.why, sizeof w->st.why, "the watch failed (%lld): %.300s", (long long)code,
                 str(obj, "message"));
    } else {
        snprintf(w->why, sizeof w->why, "the watch sent an event of unknown type");
        json_decref(doc);
        return -EBADMSG;
    }
    json_decref(doc);
    return w->on_event ? w->on_event(ev, &w->st, w->ud) : 0;
}

int al_kube_watch_feed(al_kube_watch *w, const char *buf, size_t len) {
    while (len) {
        const char *nl = memchr(buf, '\n', len);
        size_t take = nl ? (size_t)(nl - buf) : len;
        if (w->len + take > AL_KUBE_LINE_MAX) {
            snprintf(w->why, sizeof w->why, "the watch sent a line over %u bytes", AL_KUBE_LINE_MAX);
            return -EMSGSIZE;
        }
        if (w->len + take + 1 > w->cap) {
            size_t cap = w->cap ? w->cap : 16384;
            while (cap < w->len + take + 1)
                cap *= 2;
            char *n = realloc(w->line, cap);
            if (!n)
                return -ENOMEM;
            w->line = n;
            w->cap = cap;
        }
        memcpy(w->line + w->len, buf, take);
        w->len += take;
        buf += take;
        len -= take;
        if (!nl)
            break;
        buf++;
        len--;
        int r = event(w, w->line, w->len);
        w->len = 0;
        if (r != 0)
            return r;
    }
    return 0;
}

void al_kube_watch_free(al_kube_watch *w) {
    free(w->line);
    w->line = NULL;
    w->len = w->cap = 0;
}
