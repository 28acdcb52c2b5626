/* What this host enforces, control by control, found by trying each one in
 * a throwaway child rather than by reading version numbers. */
#pragma once

#include "box.h"

typedef struct al_doctor_item {
    const char *name;
    al_level level;
    char detail[320];
} al_doctor_item;

#define AL_DOCTOR_MAX 16

/* Fills up to AL_DOCTOR_MAX items; returns how many. */
size_t al_doctor(al_doctor_item *items);

/* Host root's inotify instances (fs.inotify.max_user_instances, -1 when
 * unreadable), which every box's opens are charged to as well. */
long al_doctor_inotify_max(void);
/* What HAVE of them holds: BOXES at once (0: not known; BOXES_NAME, the
 * setting that says so) may take their share each. Applied, with the
 * value to raise it to, when they could take more than half; a boundary
 * otherwise. */
al_level al_doctor_inotify(long have, unsigned boxes, const char *boxes_name, char *detail, size_t len);
