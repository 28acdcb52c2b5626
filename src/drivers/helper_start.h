/*
 * The helper process both boxes run in (helper_start.c): the one way the
 * drivers start `airlock helper` and hand it a job.
 */
#pragma once

#include "driver.h"

/* Start SELF_EXE helper with JOB, encoded (-E2BIG: too large for it), with
 * the N_PASS fds PASS (may be NULL) as its fds 3, 4, ...: each the same
 * open file as the caller's, so a lock on it is held while either holds
 * it. */
#define AL_HELPER_PASS_MAX 2
int al_driver_helper_start(const char *self_exe, const al_job *job, const int *pass, size_t n_pass,
                           al_driver_run *ret, al_error *err);
/* A job's wire form (al_job_encode's TEXT of LEN bytes) as one line on
 * FD: a helper's stdin, a warm one's when its run comes. */
int al_driver_helper_send(int fd, const char *text, size_t len);
int al_driver_helper_cancel(al_driver_run *r);
int al_driver_helper_wait(al_driver_run *r);
