/* `airlock helper`: the service's per-run process; its work is the
 * drivers' (src/drivers/helper_main.c). */
#include <stdio.h>

#include "cli.h"

int cli_helper(int argc, char **argv) {
    if (cli_help_asked(argc, argv)) {
        printf("usage: airlock helper   (internal: the service's per-run process; one JSON job on stdin)\n");
        return 0;
    }
    return al_driver_helper_main();
}
