/*
 * The box side of joining its cgroup (cgroup.h's al_cgroup_join), apart
 * from the rest of cgroup.c: fork_init.c's shared object carries it too.
 */
#include <unistd.h>

#include "cgroup.h"

int al_cgroup_join_self(al_cgroup_join *j) {
    int r = 0;
    for (unsigned i = 0; i < j->n_self; i++) {
        if (r == 0 && write(j->self_fds[i], "0", 1) != 1)
            r = -errno;
        close(j->self_fds[i]);
        j->self_fds[i] = -1;
    }
    j->n_self = 0;
    return r;
}

void al_cgroup_join_close(al_cgroup_join *j) {
    for (unsigned i = 0; i < j->n_self; i++)
        if (j->self_fds[i] >= 0)
            close(j->self_fds[i]);
    j->n_self = 0;
    if (j->clone_fd >= 0)
        close(j->clone_fd);
    j->clone_fd = -1;
}
