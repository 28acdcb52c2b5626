#pragma once
/*
 * How a pool of boxes made ahead of need (warm_pool.c, docker_pool.c)
 * takes on a new shape of run. Each shape it learns has the host make
 * boxes that only runs of that shape can use; so a tenant that varied its
 * runs' limits on every run would have the pool make boxes no run takes,
 * as much work again as its runs, and push out the shapes every other
 * tenant's runs use. Hence: at most AL_SHAPE_LEARN_MAX new shapes in any
 * AL_SHAPE_LEARN_WINDOW_S, and a shape asked for in the last
 * AL_SHAPE_KEEP_S is never pushed out for a new one. A run whose shape is
 * not learnt goes cold, as any miss does.
 */
#include <stdint.h>

#define AL_SHAPE_LEARN_MAX 8
#define AL_SHAPE_LEARN_WINDOW_S 60
#define AL_SHAPE_KEEP_S 60

typedef struct al_shape_learning {
    int64_t at_s[AL_SHAPE_LEARN_MAX];   /* when the last few shapes were learnt (0: never) */
} al_shape_learning;

/* The slot of N for a new shape at NOW: a free one (LAST_ASKED_S[i] < 0),
 * else the one asked for longest ago if that was AL_SHAPE_KEEP_S or more
 * before; -1 when none may be taken or AL_SHAPE_LEARN_MAX shapes were
 * learnt in the window. A slot given is counted as learnt. */
int al_shape_slot_for_new(al_shape_learning *sl, int64_t now_s, const int64_t *last_asked_s, int n);
