/* Unit tests for the pools' rule for a new shape of run
 * (src/drivers/shape_admit.c): a free slot first, the slot asked for
 * longest ago only once it is AL_SHAPE_KEEP_S old, and at most
 * AL_SHAPE_LEARN_MAX shapes learnt in any AL_SHAPE_LEARN_WINDOW_S. */
#include "drivers/shape_admit.h"

#include "check.h"

#define N 16

int main(void) {
    al_shape_learning sl = { { 0 } };
    int64_t asked[N];
    for (int i = 0; i < N; i++)
        asked[i] = -1;
    int64_t t = 1000000;

    /* free slots, in order, up to the rate: then none, free slots or not */
    for (int i = 0; i < AL_SHAPE_LEARN_MAX; i++) {
        int s = al_shape_slot_for_new(&sl, t + i, asked, N);
        CHECK(s == i);
        asked[s] = t + i;
    }
    CHECK(al_shape_slot_for_new(&sl, t + AL_SHAPE_LEARN_MAX, asked, N) == -1);
    CHECK(al_shape_slot_for_new(&sl, t + AL_SHAPE_LEARN_WINDOW_S - 1, asked, N) == -1);
    /* the window moves on: the first learn is out of it, so one more */
    int s = al_shape_slot_for_new(&sl, t + AL_SHAPE_LEARN_WINDOW_S, asked, N);
    CHECK(s == AL_SHAPE_LEARN_MAX);
    asked[s] = t + AL_SHAPE_LEARN_WINDOW_S;
    CHECK(al_shape_slot_for_new(&sl, t + AL_SHAPE_LEARN_WINDOW_S, asked, N) == -1);

    /* all slots taken: the one asked for longest ago, once it is old enough */
    al_shape_learning fresh = { { 0 } };
    int64_t full[4] = { t + 30, t + 10, t + 20, t + 40 };
    CHECK(al_shape_slot_for_new(&fresh, t + 10 + AL_SHAPE_KEEP_S - 1, full, 4) == -1);
    CHECK(al_shape_slot_for_new(&fresh, t + 10 + AL_SHAPE_KEEP_S, full, 4) == 1);
    /* a refusal learnt nothing: the rate counts only slots given */
    al_shape_learning none = { { 0 } };
    for (int i = 0; i < 3 * AL_SHAPE_LEARN_MAX; i++)
        CHECK(al_shape_slot_for_new(&none, t, full, 4) == -1);
    CHECK(al_shape_slot_for_new(&none, t + 40 + AL_SHAPE_KEEP_S, full, 4) == 1);
    /* a free slot is taken before any in use, wherever it is */
    int64_t gap[4] = { t - 1000, t - 2000, -1, t - 3000 };
    CHECK(al_shape_slot_for_new(&fresh, t, gap, 4) == 2);

    printf("shape admission: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
