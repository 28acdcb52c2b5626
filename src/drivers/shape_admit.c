/* The pools' rule for a new shape of run (shape_admit.h). */
#include "shape_admit.h"

int al_shape_slot_for_new(al_shape_learning *sl, int64_t now_s, const int64_t *last_asked_s, int n) {
    int oldest_learn = 0, recent = 0;
    for (int i = 0; i < AL_SHAPE_LEARN_MAX; i++) {
        if (sl->at_s[i] && now_s - sl->at_s[i] < AL_SHAPE_LEARN_WINDOW_S)
            recent++;
        if (sl->at_s[i] < sl->at_s[oldest_learn])
            oldest_learn = i;
    }
    if (recent >= AL_SHAPE_LEARN_MAX)
        return -1;
    int pick = -1;
    for (int i = 0; i < n && (pick < 0 || last_asked_s[pick] >= 0); i++)
        if (last_asked_s[i] < 0 || pick < 0 || last_asked_s[i] < last_asked_s[pick])
            pick = i;
    if (pick < 0 || (last_asked_s[pick] >= 0 && now_s - last_asked_s[pick] < AL_SHAPE_KEEP_S))
        return -1;
    sl->at_s[oldest_learn] = now_s;
    return pick;
}
