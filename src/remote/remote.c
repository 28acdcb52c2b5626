/* The remote layer's entry (remote.h): a run or a sweep handed to the
 * service it names. Above e2b.c and daytona.c, which share common.c below
 * them. */
#include "remote_int.h"

int al_remote_run(const al_remote_opts *o, const al_box_config *cfg, al_box_result *res) {
    return o->kind == AL_REMOTE_DAYTONA ? al_remote_daytona_run(o, cfg, res) : al_remote_e2b_run(o, cfg, res);
}

int al_remote_sweep(const al_remote_opts *o, const char *prefix, const char *keep, al_error *err) {
    return o->kind == AL_REMOTE_DAYTONA ? al_remote_daytona_sweep(o, prefix, keep, err)
                                        : al_remote_e2b_sweep(o, prefix, keep, err);
}
