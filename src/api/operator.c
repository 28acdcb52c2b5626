/* The operator's view (operator.h). */
#include "operator.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/util.h"

#define TOKEN_MIN 16

int al_operator_init(al_operator *o, const al_service_config *cfg, al_error *err) {
    *o = (al_operator){ .access = cfg->operator_access };
    if (!cfg->operator_token_file[0]) {
        if (o->access == AL_OPERATOR_TOKEN)
            return al_err(err, "operator", EINVAL, "operator_access = token needs operator_token_file");
        return 0;
    }
    _cleanup_close_ int fd = open(cfg->operator_token_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return al_err(err, "operator", errno, "operator_token_file %s: %m", cfg->operator_token_file);
    /* a token others on the host can read is everyone's on the host */
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077))
        return al_err(err, "operator", EPERM, "operator_token_file %s must be a regular file only its owner may "
                      "read (chmod 600)", cfg->operator_token_file);
    char buf[sizeof o->token];
    size_t len = 0;
    while (len < sizeof buf) {
        ssize_t r = read(fd, buf + len, sizeof buf - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return al_err(err, "operator", errno, "operator_token_file %s: %m", cfg->operator_token_file);
        if (r == 0)
            break;
        len += (size_t)r;
    }
    if (len == sizeof buf)
        return al_err(err, "operator", EFBIG, "operator_token_file %s: longer than %zu bytes", cfg->operator_token_file,
                      sizeof buf - 1);
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
        len--;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)buf[i] <= 0x20 || buf[i] == 0x7f)
            len = 0;
    if (len < TOKEN_MIN)
        return al_err(err, "operator", EINVAL, "operator_token_file %s: want one line of %d or more printable "
                      "characters (openssl rand -hex 32)", cfg->operator_token_file, TOKEN_MIN);
    memcpy(o->token, buf, len);
    o->token[len] = '\0';
    return 0;
}

/* A and B, of the same length N, are equal: in a time that does not say
 * where they differ */
static bool same(const char *a, const char *b, size_t n) {
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static bool from_loopback(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return false;
    if (ci->client_addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ci->client_addr;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (ci->client_addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ci->client_addr;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return false;
}

bool al_operator_allowed(const al_operator *o, struct MHD_Connection *c) {
    if (o->access == AL_OPERATOR_OPEN)
        return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    size_t n = strlen(o->token);
    if (n && auth && strncmp(auth, "Bearer ", 7) == 0 && strlen(auth + 7) == n && same(auth + 7, o->token, n))
        return true;
    return o->access == AL_OPERATOR_LOOPBACK && from_loopback(c);
}
