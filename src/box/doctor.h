/* What this host enforces, control by control, found by trying each one in
 * a throwaway child rather than by reading version numbers. */
#pragma once

#include "box.h"

typedef struct al_doctor_item {
    const char *name;
    al_level level;
    char detail[240];
} al_doctor_item;

#define AL_DOCTOR_MAX 16

/* Fills up to AL_DOCTOR_MAX items; returns how many. */
size_t al_doctor(al_doctor_item *items);
