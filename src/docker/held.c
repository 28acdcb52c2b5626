/* Held containers (container_int.h): made and started ahead of need for a
 * pool, one run's each; checked against the daemon's record before a run
 * uses one, released by their owner after it, and swept when no live
 * airlock holds them.
 */
#include "container_int.h"

#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "../box/uidpool.h"

/* ---- a held container, for one run ---- */

/* A held container is used for a run only if the daemon's record of it
 * (not the service's word) shows it made as this run's own would be: every
 * setting al_docker_create_body() makes, the image, no exec ever run in it,
 * and the defaults al_docker_create() relies on for what it does not set
 * (no capability added, no group, no host namespace, no sysctl, no volume
 * or device). */
int al_docker_same_box(dbox *b, json_t *ins, al_error *err) {
    const al_docker_held *h = b->o->held;
    json_t *want = al_docker_create_body(b, h->image_id, err);
    if (!want)
        return -ENOMEM;
    json_t *hc = json_object_get(ins, "HostConfig"), *cc = json_object_get(ins, "Config");
    json_t *whc = json_object_get(want, "HostConfig");
    const char *why = NULL;
    const char *key;
    json_t *v;
    json_object_foreach(whc, key, v) {
        if (!json_equal(v, json_object_get(hc, key)) && !why)
            why = key;
    }
    /* runc is the daemon's default: no "Runtime" asked, "runc" recorded */
    const char *rt = json_string_value(json_object_get(hc, "Runtime"));
    if (!why && (!rt || strcmp(rt, al_docker_runtime_name(b->o->runtime)) != 0))
        why = "Runtime";
    static const char *const cfg_keys[] = { "User", "WorkingDir", "Env", "Tty", "OpenStdin", "NetworkDisabled" };
    for (size_t i = 0; !why && i < ELEMENTSOF(cfg_keys); i++)
        if (!json_equal(json_object_get(want, cfg_keys[i]), json_object_get(cc, cfg_keys[i])))
            why = cfg_keys[i];
    /* its holder: a sleep of the pool's length, not the run's */
    json_t *cmd = json_object_get(cc, "Cmd");
    const char *c0 = json_string_value(json_array_get(cmd, 0)), *c1 = json_string_value(json_array_get(cmd, 1));
    if (!why && (json_array_size(cmd) != 2 || !c0 || strcmp(c0, "sleep") != 0 || !c1 || !*c1 ||
                 strspn(c1, "0123456789") != strlen(c1)))
        why = "Cmd";
    /* its labels: ours, and the image's digest, which it inherits */
    json_t *labels = json_object_get(cc, "Labels");
    json_object_foreach(json_object_get(want, "Labels"), key, v) {
        if (!why && !json_equal(v, json_object_get(labels, key)))
            why = "Labels";
    }
    const char *ld = json_string_value(json_object_get(labels, "dev.airlock.digest"));
    const char *digest = b->o->image_digest ? b->o->image_digest : "";
    if (strncmp(digest, "sha256:", 7) == 0)
        digest += 7;
    if (!why && (!ld || strcmp(ld, digest) != 0))
        why = "the image's digest label";
    const char *img = json_string_value(json_object_get(ins, "Image"));
    if (!why && (!img || strcmp(img, h->image_id) != 0))
        why = "Image";
    /* no script (no exec at all) has run in it */
    if (!why && json_array_size(json_object_get(ins, "ExecIDs")) > 0)
        why = "ExecIDs";
    /* what al_docker_create() leaves to the daemon's defaults is still the default */
    static const char *const empty[] = { "CapAdd", "GroupAdd", "Sysctls", "VolumesFrom", "DeviceCgroupRules",
                                         "Binds", "Mounts", "Devices", "Links", "ExtraHosts", "Dns", "DnsOptions",
                                         "DnsSearch", "DeviceRequests" };
    for (size_t i = 0; !why && i < ELEMENTSOF(empty); i++) {
        json_t *x = json_object_get(hc, empty[i]);
        if (x && !json_is_null(x) && !((json_is_array(x) && json_array_size(x) == 0) ||
                                       (json_is_object(x) && json_object_size(x) == 0)))
            why = empty[i];
    }
    static const char *const blank[] = { "PidMode", "UTSMode", "UsernsMode", "CgroupParent", "Cgroup", "VolumeDriver" };
    for (size_t i = 0; !why && i < ELEMENTSOF(blank); i++) {
        const char *x = json_string_value(json_object_get(hc, blank[i]));
        if (x && *x)
            why = blank[i];
    }
    if (!why && json_is_true(json_object_get(hc, "OomKillDisable")))
        why = "OomKillDisable";
    if (!why && json_is_true(json_object_get(hc, "PublishAllPorts")))
        why = "PublishAllPorts";
    /* (WHY may be a key of WANT's: said before WANT goes) */
    int r = why ? al_err(err, "docker", ESTALE, "the held container %.12s was not made as this run's own (%s differs)",
                         b->id, why)
                : 0;
    json_decref(want);
    return r;
}

/* The container the owner made ahead of need (o->held) as this run's:
 * only if its holder outlives the run and the daemon says it was made for
 * this run's limits and uids. Its owner removes it, never this run. */
int al_docker_use_held(dbox *b, al_error *err) {
    const al_docker_held *h = b->o->held;
    if ((uint64_t)h->hold_until_s < (uint64_t)time(NULL) + b->cfg->limits.wall_ms / 1000 + HOLD_MARGIN_S)
        return al_err(err, "docker", ESTALE, "the held container's holder ends before this run could");
    if (!h->id[0] || strspn(h->id, "0123456789abcdef") != strlen(h->id) || !h->holder || !h->uid)
        return al_err(err, "docker", EINVAL, "the held container is not named");
    snprintf(b->id, sizeof b->id, "%s", h->id);
    snprintf(b->res->engine_image, sizeof b->res->engine_image, "%s", h->image_id);
    b->holder = h->holder;
    b->uid = h->uid;
    int r = al_docker_inspect_init(b, al_docker_same_box, err);
    if (r == 0)
        b->res->pooled = true;
    return r;
}

/* ---- their lifecycle, for their owner ---- */

int al_docker_hold(const al_docker_opts *o, const al_box_limits *l, uint64_t idle_s, al_docker_held *ret,
                   al_error *err) {
    memset(ret, 0, sizeof *ret);
    ret->holder_lock = ret->uid_lock = -1;
    const char *digest = o->image_digest;
    if (!o->image_dir || !digest)
        return al_err(err, "docker", EINVAL, "a held container is of an image");
    if (strncmp(digest, "sha256:", 7) == 0)
        digest += 7;
    al_box_config cfg = { .limits = *l, .stdin_fd = -1, .cancel_fd = -1, .out_dirfd = -1 };
    al_box_result res = { 0 };
    dbox b = { .o = o, .cfg = &cfg, .res = &res, .holder_lock = -1, .uid_lock = -1, .rootfd = -1, .init_fd = -1, .main_fd = -1,
               .keeper_fd = -1 };
    /* its holder lives as long as it may wait, and then as a run's would */
    b.hold_s = idle_s + l->wall_ms / 1000 + HOLD_MARGIN_S;
    char sock[108];
    int r = al_engine_socket_path(o->socket, sock, sizeof sock, err);
    if (r < 0 || (r = al_engine_open(&b.e, sock, err)) < 0)
        return r;
    b.engine_open = true;
    int64_t t0 = (int64_t)time(NULL);
    /* only an image the daemon holds already: the first run of an image
     * loads it (in its helper, a process of its own) */
    if ((r = al_docker_image_loaded(&b.e, digest, ret->image_id, err)) == 0 &&
        (r = al_uid_acquire(&b.holder, &b.holder_lock, err)) == 0 && (r = al_uid_acquire(&b.uid, &b.uid_lock, err)) == 0 &&
        (r = al_docker_create(&b, ret->image_id, err)) == 0)
        r = al_docker_start_and_inspect(&b, err);
    if (b.init_fd >= 0)
        close(b.init_fd);
    if (r < 0) {
        al_docker_remove_container(&b);
        al_engine_close(&b.e);
        if (b.uid_lock >= 0)
            close(b.uid_lock);
        if (b.holder_lock >= 0)
            close(b.holder_lock);
        return r;
    }
    al_engine_close(&b.e);
    snprintf(ret->id, sizeof ret->id, "%s", b.id);
    ret->holder = b.holder;
    ret->uid = b.uid;
    ret->holder_lock = b.holder_lock;
    ret->uid_lock = b.uid_lock;
    ret->hold_until_s = t0 + (int64_t)b.hold_s;
    return 0;
}

bool al_docker_held_alive(const char *socket, const al_docker_held *h) {
    char sock[108], path[200];
    al_error err = { 0 };
    al_engine e;
    if (!h->id[0] || al_engine_socket_path(socket, sock, sizeof sock, &err) < 0 || al_engine_open(&e, sock, &err) < 0)
        return false;
    snprintf(path, sizeof path, "/containers/%s/json", h->id);
    json_t *ins = NULL;
    bool up = al_engine_call(&e, "GET", path, NULL, &ins, &err) == 200 &&
              json_is_true(json_object_get(json_object_get(ins, "State"), "Running"));
    json_decref(ins);
    al_engine_close(&e);
    return up;
}

bool al_docker_release(const char *socket, al_docker_held *h) {
    char sock[108];
    al_error err = { 0 };
    al_engine e;
    int st = -1;
    if (!h->id[0])
        st = 204;
    else if (al_engine_socket_path(socket, sock, sizeof sock, &err) == 0 && al_engine_open(&e, sock, &err) == 0) {
        char path[200];
        snprintf(path, sizeof path, "/containers/%s?force=1&v=1", h->id);
        st = al_engine_call(&e, "DELETE", path, NULL, NULL, &err);
        al_engine_close(&e);
    }
    /* its uids go back only once it is gone (204, or 404: gone already) */
    if (st != 204 && st != 404)
        return false;
    if (h->uid_lock >= 0)
        close(h->uid_lock);
    if (h->holder_lock >= 0)
        close(h->holder_lock);
    h->uid_lock = h->holder_lock = -1;
    h->id[0] = '\0';
    /* its keeper, told, finds it gone and ends */
    if (h->keeper_pid > 0) {
        close(h->keeper_fd);
        while (waitpid(h->keeper_pid, NULL, 0) < 0 && errno == EINTR)
            ;
        h->keeper_pid = 0;
    }
    return true;
}

void al_docker_sweep(const char *socket) {
    char sock[108];
    al_error err = { 0 };
    al_engine e;
    if (al_engine_socket_path(socket, sock, sizeof sock, &err) < 0 || al_engine_open(&e, sock, &err) < 0)
        return;
    json_t *list = NULL;
    if (al_engine_call(&e, "GET", "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22" LABEL_BOX "%22%5D%7D",
                       NULL, &list, &err) == 200) {
        size_t i;
        json_t *c;
        json_array_foreach(list, i, c) {
            const char *id = json_string_value(json_object_get(c, "Id"));
            const char *u = json_string_value(json_object_get(json_object_get(c, "Labels"), LABEL_UID));
            unsigned uid = 0;
            if (!id || !u || sscanf(u, "%u", &uid) != 1 || strspn(id, "0123456789abcdef") != strlen(id))
                continue;
            if (!al_uid_is_free((uid_t)uid))
                continue;
            char path[200];
            snprintf(path, sizeof path, "/containers/%s?force=1&v=1", id);
            al_engine_call(&e, "DELETE", path, NULL, NULL, &err);
        }
    }
    json_decref(list);
    al_engine_close(&e);
}
