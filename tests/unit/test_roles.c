/* Unit tests for the typed roles (src/core/roles.c): each name parses to
 * its role and back, nothing else parses, and a role the store holds that
 * is none of them is a member's, never more. */
#include "core/roles.h"

#include <string.h>

#include "check.h"

int main(void) {
    for (int i = 0; i < _AL_ROLE_MAX; i++) {
        CHECK(al_role_name((al_role)i) != NULL);
        CHECK(al_role_from_name(al_role_name((al_role)i)) == (al_role)i);
    }
    CHECK(al_role_from_name("admin") == AL_ROLE_ADMIN);
    CHECK(al_role_from_name("approver") == AL_ROLE_APPROVER);
    CHECK(al_role_from_name("member") == AL_ROLE_MEMBER);
    CHECK(al_role_from_name("Admin") == _AL_ROLE_INVALID);
    CHECK(al_role_from_name("") == _AL_ROLE_INVALID);
    CHECK(al_role_from_name(NULL) == _AL_ROLE_INVALID);
    CHECK(al_role_name(_AL_ROLE_MAX) == NULL && al_role_name(_AL_ROLE_INVALID) == NULL);

    al_principal p = { .role = "admin" };
    CHECK(al_principal_role(&p) == AL_ROLE_ADMIN);
    strcpy(p.role, "owner");
    CHECK(al_principal_role(&p) == AL_ROLE_MEMBER);
    CHECK(al_principal_role(NULL) == AL_ROLE_MEMBER);

    CHECK(al_role_decides(AL_ROLE_ADMIN) && al_role_decides(AL_ROLE_APPROVER) && !al_role_decides(AL_ROLE_MEMBER));

    fprintf(stderr, "roles: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
