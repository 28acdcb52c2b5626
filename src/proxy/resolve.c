#include "resolve.h"

#include <arpa/nameser.h>
#include <errno.h>
#include <netdb.h>
#include <resolv.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

static void add(al_resolved *r, int family, const unsigned char *data, uint16_t port) {
    if (r->n == AL_RESOLVE_MAX)
        return;
    struct sockaddr_storage *ss = &r->addr[r->n++];
    memset(ss, 0, sizeof *ss);
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)ss;
        s->sin_family = AF_INET;
        s->sin_port = htons(port);
        memcpy(&s->sin_addr, data, 4);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
        s->sin6_family = AF_INET6;
        s->sin6_port = htons(port);
        memcpy(&s->sin6_addr, data, 16);
    }
}

#define ANSWER_MAX 65536

int al_dns_answer_parse(const unsigned char *ans, size_t len, int type, uint16_t port, al_resolved *ret) {
    /* a DNS message is at most 65535 bytes (its TCP length is 16 bits); the
     * bound also keeps LEN within ns_initparse's int */
    if (len > 65535)
        return -EBADMSG;
    ns_msg msg;
    if (ns_initparse(ans, (int)len, &msg) < 0)
        return -EBADMSG;
    int count = ns_msg_count(msg, ns_s_an);
    for (int i = 0; i < count; i++) {
        ns_rr rr;
        if (ns_parserr(&msg, ns_s_an, i, &rr) < 0)
            return -EBADMSG;
        /* CNAME chains come with their records; only addresses count */
        if (ns_rr_type(rr) == ns_t_a && type == ns_t_a && ns_rr_rdlen(rr) == 4)
            add(ret, AF_INET, ns_rr_rdata(rr), port);
        else if (ns_rr_type(rr) == ns_t_aaaa && type == ns_t_aaaa && ns_rr_rdlen(rr) == 16)
            add(ret, AF_INET6, ns_rr_rdata(rr), port);
    }
    return 0;
}

static int query(res_state st, const char *name, int type, uint16_t port, al_resolved *ret) {
    _cleanup_free_ unsigned char *ans = malloc(ANSWER_MAX);
    if (!ans)
        return -ENOMEM;
    int len = res_nquery(st, name, ns_c_in, type, ans, ANSWER_MAX);
    if (len < 0)
        return st->res_h_errno == HOST_NOT_FOUND || st->res_h_errno == NO_DATA ? -ENOENT : -EHOSTUNREACH;
    /* res_nquery returns the answer's whole length even when it cut a TCP
     * answer to fit the buffer: parsing that length would read past it */
    if (len > ANSWER_MAX)
        return -EBADMSG;
    return al_dns_answer_parse(ans, (size_t)len, type, port, ret);
}

int al_resolve(const char *name, uint16_t port, const struct sockaddr_in *resolver, al_resolved *ret) {
    memset(ret, 0, sizeof *ret);
    struct __res_state st;
    memset(&st, 0, sizeof st);
    if (res_ninit(&st) < 0)
        return -EIO;
    /* the name is taken as given: no search domains appended */
    st.options &= ~(unsigned long)(RES_DNSRCH | RES_DEFNAMES);
    st.retrans = 2;
    st.retry = 2;
    if (resolver) {
        st.nsaddr_list[0] = *resolver;
        st.nscount = 1;
    }
    int r4 = query(&st, name, ns_t_a, port, ret);
    int r6 = query(&st, name, ns_t_aaaa, port, ret);
    res_nclose(&st);
    if (ret->n > 0)
        return 0;
    if (r4 == -ENOENT || r6 == -ENOENT)
        return -ENOENT;
    return r4 < 0 ? r4 : r6 < 0 ? r6 : -ENOENT;
}
