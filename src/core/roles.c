/* Roles (roles.h): their names, in one table. */
#include <string.h>

#include "roles.h"
#include "../util/util.h"

static const char *const names[_AL_ROLE_MAX] = {
    [AL_ROLE_MEMBER] = "member",
    [AL_ROLE_APPROVER] = "approver",
    [AL_ROLE_ADMIN] = "admin",
};

const char *al_role_name(al_role r) {
    return r >= 0 && r < _AL_ROLE_MAX ? names[r] : NULL;
}

al_role al_role_from_name(const char *name) {
    return (al_role)al_name_index(names, _AL_ROLE_MAX, name);
}

al_role al_principal_role(const al_principal *p) {
    al_role r = p ? al_role_from_name(p->role) : _AL_ROLE_INVALID;
    return r == _AL_ROLE_INVALID ? AL_ROLE_MEMBER : r;
}

bool al_role_decides(al_role r) {
    return r == AL_ROLE_APPROVER || r == AL_ROLE_ADMIN;
}
