/*
 * `airlock run --package LANG:SPEC ...` (cli.h's cli_pkg_*): a run's
 * packages installed before its box, as the service's helper installs
 * them (src/drivers/install.c), so that the mechanism is usable and
 * testable without a service. The layers live in the state directory's
 * layers/ (AIRLOCK_STATE), the installer image is the image store's
 * "installer" (`airlock image build installer`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../drivers/pkg_spec.h"
#include "cli.h"

#define EXIT_AIRLOCK 125

int cli_pkg_option(cli_pkg_opts *p, const char *a, const char *v) {
    if (strcmp(a, "--package") == 0) {
        const char *colon = strchr(v, ':');
        al_pkg_lang l;
        char lang[16];
        if (!colon || (size_t)(colon - v) >= sizeof lang) {
            fprintf(stderr, "airlock run: --package %s: want python:SPEC or node:SPEC\n", v);
            return EXIT_AIRLOCK;
        }
        snprintf(lang, sizeof lang, "%.*s", (int)(colon - v), v);
        al_error err = { 0 };
        if (al_pkg_lang_from_name(lang, &l) < 0 || al_pkg_spec_check(l, colon + 1, &err) < 0) {
            fprintf(stderr, "airlock run: --package %s: %s\n", v, err.msg[0] ? err.msg : "want python:SPEC or node:SPEC");
            return EXIT_AIRLOCK;
        }
        const char **list = l == AL_PKG_PYTHON ? p->python : p->node;
        size_t *n = l == AL_PKG_PYTHON ? &p->n_python : &p->n_node;
        if (*n == AL_JOB_PKG_MAX) {
            fprintf(stderr, "airlock run: at most %d %s packages\n", AL_JOB_PKG_MAX, lang);
            return EXIT_AIRLOCK;
        }
        list[(*n)++] = colon + 1;
    } else if (strcmp(a, "--package-registries") == 0) {
        p->registries = v;
    } else if (strcmp(a, "--package-index") == 0) {
        p->index = v;
    } else if (strcmp(a, "--package-npm-registry") == 0) {
        p->npm_registry = v;
    } else if (strcmp(a, "--package-scripts") == 0) {
        if (strcmp(v, "box") != 0 && strcmp(v, "refuse") != 0) {
            fprintf(stderr, "airlock run: --package-scripts %s: want box or refuse\n", v);
            return EXIT_AIRLOCK;
        }
        p->refuse_scripts = strcmp(v, "refuse") == 0;
    } else if (strcmp(a, "--package-timeout") == 0 || strcmp(a, "--package-memory") == 0) {
        uint64_t x = 0;
        bool t = a[10] == 't';
        if ((t ? al_parse_u64(v, &x) : al_parse_size(v, &x)) < 0 || (t ? x < 1 || x > 3600 : x < (64ULL << 20) || x > (16ULL << 30))) {
            fprintf(stderr, "airlock run: %s %s: want %s\n", a, v, t ? "1 to 3600 seconds" : "a size from 64M to 16G");
            return EXIT_AIRLOCK;
        }
        *(t ? &p->timeout_s : &p->memory_bytes) = x;
    } else {
        return 0;
    }
    return -1;
}

bool cli_pkg_wanted(const cli_pkg_opts *p) { return p->n_python || p->n_node; }

static void on_install_output(void *ud, al_stream s, const char *buf, size_t len) {
    /* progress: stderr always (stdout is the run's, or --json's document) */
    cli_write_safe(stderr, buf, len);
    fflush(stderr);
}

/* P as a job's packages (the service's helper gets the same fields) */
static int pkg_job(const cli_pkg_opts *p, const char *idir, al_job *j, al_error *err) {
    const char *index = p->index ? p->index : AL_INSTALL_INDEX_PYTHON_DEFAULT;
    const char *npm = p->npm_registry ? p->npm_registry : AL_INSTALL_REGISTRY_NODE_DEFAULT;
    const char *env = getenv("AIRLOCK_PACKAGE_HOSTS");
    const char *regs = p->registries ? p->registries : env && *env ? env : NULL;
    char network[AL_NET_MAX_HOSTS * AL_NET_NAME_MAX];
    int r = al_install_network(regs, p->n_python ? index : NULL, p->n_node ? npm : NULL, network, sizeof network, err);
    if (r < 0)
        return r;
    char layers[PATH_MAX];
    snprintf(layers, sizeof layers, "%s/layers", cli_state_dir());
    for (size_t i = 0; i < p->n_python && r == 0; i++)
        r = al_job_add_pkg_python(j, p->python[i]);
    for (size_t i = 0; i < p->n_node && r == 0; i++)
        r = al_job_add_pkg_node(j, p->node[i]);
    if (r == 0)
        r = al_job_set(&j->pkg_layers_dir, layers);
    if (r == 0)
        r = al_job_set(&j->pkg_installer_dir, idir);
    if (r == 0)
        r = al_job_set(&j->pkg_index_python, index);
    if (r == 0)
        r = al_job_set(&j->pkg_registry_node, npm);
    if (r == 0)
        r = al_job_set(&j->pkg_network, network);
    if (r < 0)
        return al_err(err, "packages", -r, "out of memory");
    j->pkg_scripts = !p->refuse_scripts;
    /* the service's defaults (docs/operations.md) */
    al_box_limits_default(&j->pkg_limits);
    j->pkg_limits.wall_ms = (p->timeout_s ? p->timeout_s : AL_INSTALL_TIMEOUT_S_DEFAULT) * 1000;
    j->pkg_limits.memory_bytes = p->memory_bytes ? p->memory_bytes : (uint64_t)AL_INSTALL_MEMORY_MB_DEFAULT << 20;
    j->pkg_limits.cpu_millis = 1000;
    j->pkg_limits.pids = 512;
    j->pkg_layer_max_bytes = (uint64_t)AL_INSTALL_LAYER_MAX_MB_DEFAULT << 20;
    j->pkg_layer_max_files = AL_INSTALL_LAYER_MAX_FILES_DEFAULT;
    return 0;
}

int cli_pkg_install(const cli_pkg_opts *p, const char *image_digest, int cancel_fd, cli_pkg_run *ret) {
    al_job_init(&ret->job);
    al_error err = { 0 };
    char images[PATH_MAX], idir[PATH_MAX];
    cli_images_dir(images, sizeof images);
    if (al_install_image(images, idir, sizeof idir, &err) < 0) {
        fprintf(stderr, "airlock run: --package: the installer image: %s (`airlock image build " AL_INSTALLER_IMAGE
                        "` makes it)\n", err.msg);
        return EXIT_AIRLOCK;
    }
    if (pkg_job(p, idir, &ret->job, &err) < 0) {
        fprintf(stderr, "airlock run: %s\n", err.msg);
        return EXIT_AIRLOCK;
    }
    ret->in = (al_install){ .job = &ret->job, .image_digest = image_digest, .cancel_fd = cancel_fd,
                            .on_output = on_install_output, .layer_fd = -1 };
    ret->started = true;
    if (al_install_run(&ret->in, &err) < 0) {
        ret->error = err;
        ret->failed = true;
        return -1;
    }
    fprintf(stderr, "airlock: packages: layer sha256:%.12s %s in %llu ms\n", ret->in.key,
            ret->in.reused ? "reused" : "installed", (unsigned long long)ret->in.ms);
    return -1;
}

void cli_pkg_box(const cli_pkg_run *r, al_box_config *cfg) {
    if (!r->started)
        return;
    cfg->binds = r->in.binds;
    cfg->n_binds = r->in.n_binds;
    cfg->env_extra = r->in.env;
    cfg->n_env_extra = r->in.n_env;
}

void cli_pkg_free(cli_pkg_run *r) {
    if (r->started)
        al_install_free(&r->in);
    al_job_free(&r->job);
    r->started = false;
}
