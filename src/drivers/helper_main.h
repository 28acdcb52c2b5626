#pragma once

/* `airlock helper`: one job read on stdin (job_codec.c), its box run,
 * its events written on stdout (helper_main.c says them); the process's
 * exit status. Single-threaded: the box clones. */
int al_driver_helper_main(void);
