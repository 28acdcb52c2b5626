#include <string.h>

#include "../box/doctor.h"
#include "../image/image.h"
#include "cli.h"

int cli_doctor(int argc, char **argv) {
    bool json = argc > 1 && strcmp(argv[1], "--json") == 0;
    al_doctor_item items[AL_DOCTOR_MAX];
    size_t n = al_doctor(items);
    if (json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "control", items[i].name, "level",
                                                 al_level_name(items[i].level), "detail", items[i].detail));
        char images[4200];
        al_image_dir(cli_state_dir(), images, sizeof images);
        json_t *doc = json_pack("{s:o, s:s, s:o}", "controls", arr, "default_runtime", "host", "images",
                                al_image_list(images));
        char *s = json_dumps(doc, JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
        json_decref(doc);
        return 0;
    }
    printf("%-20s %-14s %s\n", "CONTROL", "LEVEL", "DETAIL");
    for (size_t i = 0; i < n; i++)
        printf("%-20s %-14s %s\n", items[i].name, al_level_name(items[i].level), items[i].detail);
    printf("\nruntime: host (the host's /usr, read-only; the default of airlock run)\n");
    char images[4200];
    al_image_dir(cli_state_dir(), images, sizeof images);
    json_t *l = al_image_list(images);
    size_t k;
    json_t *e;
    json_array_foreach(l, k, e) {
        printf("image:   %s", json_string_value(json_object_get(e, "digest")));
        size_t j;
        json_t *a;
        json_array_foreach(json_object_get(e, "aliases"), j, a) printf(" %s", json_string_value(a));
        printf(" (airlock run --image NAME)\n");
    }
    if (json_array_size(l) == 0)
        printf("images:  none in %s (airlock image build)\n", images);
    json_decref(l);
    return 0;
}
