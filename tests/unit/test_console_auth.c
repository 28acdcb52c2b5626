/* Unit tests for the console's sign-in checks (src/core/console_auth.c):
 * the CSRF token's comparison takes only the exact token, and a key's name
 * is 1 to 64 printable ASCII characters. */
#include "core/console_auth.h"

#include <string.h>

#include "check.h"

int main(void) {
    al_console_session ses = { 0 };
    CHECK(!al_session_csrf_ok(&ses, "")); /* a session without a token takes none */
    memset(ses.csrf, 'a', 64);
    ses.csrf[64] = '\0';
    char t[80];
    strcpy(t, ses.csrf);
    CHECK(al_session_csrf_ok(&ses, t));
    t[63] = 'b';
    CHECK(!al_session_csrf_ok(&ses, t)); /* the last byte counts */
    t[63] = 'a';
    t[0] = 'A';
    CHECK(!al_session_csrf_ok(&ses, t)); /* as does the first, and case */
    t[0] = 'a';
    t[63] = '\0';
    CHECK(!al_session_csrf_ok(&ses, t)); /* a prefix is not the token */
    strcpy(t, ses.csrf);
    strcat(t, "a");
    CHECK(!al_session_csrf_ok(&ses, t)); /* nor is more */
    CHECK(!al_session_csrf_ok(&ses, ""));
    CHECK(!al_session_csrf_ok(&ses, NULL));

    char name[80];
    memset(name, 'n', 64);
    name[64] = '\0';
    CHECK(al_key_name_ok(name));
    name[64] = 'n';
    name[65] = '\0';
    CHECK(!al_key_name_ok(name));
    CHECK(al_key_name_ok("ci-agent") && al_key_name_ok("a") && al_key_name_ok("deploy key (prod) #2"));
    CHECK(!al_key_name_ok("") && !al_key_name_ok(NULL));
    CHECK(!al_key_name_ok("tab\there") && !al_key_name_ok("line\n") && !al_key_name_ok("caf\xc3\xa9") &&
          !al_key_name_ok("del\x7f"));
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
