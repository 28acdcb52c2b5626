#include <string.h>

#include "../box/doctor.h"
#ifdef AIRLOCK_SERVER
#include "../docker/docker.h"
#endif
#include "../image/image.h"
#include "cli.h"
#include "../proxy/policy.h"

/* Each network mode's badge here: every mode stands on the box's network
 * namespace; a host without one enforces none of them. */
static json_t *network_badges(const al_doctor_item *items, size_t n) {
    bool netns = false;
    for (size_t i = 0; i < n; i++)
        netns |= strcmp(items[i].name, "network namespace") == 0 && items[i].level == AL_LEVEL_BOUNDARY;
    json_t *o = json_object();
    for (int m = 0; m < _AL_NET_MODE_MAX; m++) {
        al_net_badge b = al_net_mode_badge((al_net_mode)m);
        json_object_set_new(o, al_net_mode_name((al_net_mode)m),
                            json_pack("{s:s, s:s}", "level", netns ? b.level : "not-enforced", "detail",
                                      netns ? b.detail : "no network namespace on this host"));
    }
    return o;
}

#ifdef AIRLOCK_SERVER
/* `airlock doctor --driver docker`: what a container of this daemon and
 * runtime enforces, control by control, and whether the daemon answers. */
static int doctor_docker(const char *runtime, bool json) {
    al_docker_runtime rt = AL_DOCKER_RUNC;
    if (runtime && al_docker_runtime_from_name(runtime, &rt) < 0) {
        fprintf(stderr, "airlock doctor: --runtime %s: want runc or runsc\n", runtime);
        return 125;
    }
    json_t *caps = al_docker_capabilities(NULL, rt);
    if (json) {
        json_t *doc = json_pack("{s:s, s:s, s:o}", "driver", "docker", "runtime", al_docker_runtime_name(rt),
                                "controls", caps);
        char *s = json_dumps(doc, JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
        json_decref(doc);
    } else {
        printf("driver: docker, runtime %s\n%-14s %-22s %s\n", al_docker_runtime_name(rt), "CONTROL", "LEVEL", "DETAIL");
        const char *k;
        json_t *v;
        json_object_foreach(caps, k, v) printf("%-14s %-22s %s\n", k, json_string_value(json_object_get(v, "level")),
                                               json_string_value(json_object_get(v, "detail")));
        json_decref(caps);
    }
    return 0;
}
#endif

int cli_doctor(int argc, char **argv) {
    bool json = false;
    const char *driver = "native", *runtime = NULL, *url = NULL, *key = getenv("AIRLOCK_API_KEY");
    const char *op_file = getenv("AIRLOCK_OPERATOR_TOKEN_FILE");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (i + 1 < argc && strcmp(argv[i], "--url") == 0) {
            url = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--key") == 0) {
            key = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--operator-token-file") == 0) {
            op_file = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--driver") == 0) {
            driver = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--runtime") == 0) {
            runtime = argv[++i];
        } else {
            bool help = strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
            if (!help)
                fprintf(stderr, "airlock doctor: unknown option %s\n", argv[i]);
            fprintf(help ? stdout : stderr,
                    "usage: airlock doctor [--json] [--driver native|docker [--runtime runc|runsc]]\n"
                    "       airlock doctor [--json] --url URL [--key KEY] [--operator-token-file FILE]\n"
                    "  what this host (or driver) enforces, control by control; with --url, what that\n"
                    "  service enforces (KEY: default $AIRLOCK_API_KEY) and, for its operator (from a\n"
                    "  loopback address, or with the token in FILE: default $AIRLOCK_OPERATOR_TOKEN_FILE),\n"
                    "  its warm pool\n");
            return help ? 0 : 125;
        }
    }
    if (url) {
#ifdef AIRLOCK_SERVER
        return cli_doctor_service(url, key, op_file, json);
#else
        (void)key; /* main.c hands --url to airlock-server */
        (void)op_file;
        fprintf(stderr, "airlock doctor: --url is airlock-server's\n");
        return 125;
#endif
    }
    if (strcmp(driver, "docker") == 0) {
#ifdef AIRLOCK_SERVER
        return doctor_docker(runtime, json);
#else
        fprintf(stderr, "airlock doctor: --driver docker is airlock-server's\n");
        return 125;
#endif
    }
    if (strcmp(driver, "native") != 0 || runtime) {
        fprintf(stderr, "airlock doctor: --driver %s%s: want native, or docker with --runtime runc|runsc\n", driver,
                runtime ? " --runtime" : "");
        return 125;
    }
    al_doctor_item items[AL_DOCTOR_MAX];
    size_t n = al_doctor(items);
    json_t *net = network_badges(items, n);
    if (json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "control", items[i].name, "level",
                                                 al_level_name(items[i].level), "detail", items[i].detail));
        char images[4200];
        cli_images_dir(images, sizeof images);
        json_t *doc = json_pack("{s:o, s:o, s:s, s:o}", "controls", arr, "network_modes", net, "default_runtime", "host",
                                "images", al_image_list(images));
        char *s = json_dumps(doc, JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
        json_decref(doc);
        return 0;
    }
    printf("%-20s %-14s %s\n", "CONTROL", "LEVEL", "DETAIL");
    for (size_t i = 0; i < n; i++)
        printf("%-20s %-14s %s\n", items[i].name, al_level_name(items[i].level), items[i].detail);
    const char *mode;
    json_t *b;
    json_object_foreach(net, mode, b) {
        char name[32];
        snprintf(name, sizeof name, "net %s", mode);
        printf("%-20s %-20s %s\n", name, json_string_value(json_object_get(b, "level")),
               json_string_value(json_object_get(b, "detail")));
    }
    json_decref(net);
    printf("\nruntime: host (the host's /usr, read-only; the default of airlock run)\n");
    char images[4200];
    cli_images_dir(images, sizeof images);
    json_t *l = al_image_list(images);
    size_t k;
    json_t *e;
    if (json_array_size(l))
        printf("images:  (airlock run --image NAME; \"image\": NAME in the API)\n");
    json_array_foreach(l, k, e) {
        printf("image:   %s", json_string_value(json_object_get(e, "digest")));
        size_t j;
        json_t *a;
        json_array_foreach(json_object_get(e, "aliases"), j, a) printf(" %s", json_string_value(a));
        char holds[1024];
        al_image_holds_line(e, holds, sizeof holds);
        printf("\n         %s\n", holds);
    }
    if (json_array_size(l) == 0)
        printf("images:  none in %s (airlock image build)\n", images);
    json_decref(l);
    return 0;
}
