/* A person's role in their workspace, typed: what the store keeps as text
 * (al_principal.role) is read here, once, and nowhere compared as a
 * string. */
#pragma once

#include <stdbool.h>

#include "../store/store.h"

typedef enum al_role {
    AL_ROLE_MEMBER,               /* runs code, reads its workspace's runs */
    AL_ROLE_APPROVER,             /* and decides approvals */
    AL_ROLE_ADMIN,                /* and changes the workspace's settings and skills */
    _AL_ROLE_MAX,
    _AL_ROLE_INVALID = -1,
} al_role;

/* "member", "approver", "admin"; NULL for none of them. */
const char *al_role_name(al_role r);
/* _AL_ROLE_INVALID for a name that is none (or NULL). */
al_role al_role_from_name(const char *name);
/* P's role; a role the store holds that is none of them is a member's
 * (the least), never more. */
al_role al_principal_role(const al_principal *p);
/* Whether R decides approvals (an approver or an admin). */
bool al_role_decides(al_role r);
