#include <string.h>

#include "../box/doctor.h"
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
        json_t *doc = json_pack("{s:o, s:s}", "controls", arr, "default_runtime", "host");
        char *s = json_dumps(doc, JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
        json_decref(doc);
        return 0;
    }
    printf("%-20s %-14s %s\n", "CONTROL", "LEVEL", "DETAIL");
    for (size_t i = 0; i < n; i++)
        printf("%-20s %-14s %s\n", items[i].name, al_level_name(items[i].level), items[i].detail);
    printf("\nruntime: host (the host's /usr, read-only; default)\n");
    return 0;
}
