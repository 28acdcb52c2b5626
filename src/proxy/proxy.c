#include "proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <ifaddrs.h>
#include <linux/close_range.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "request.h"
#include "resolve.h"
#include "sni.h"

#define HEAD_TIMEOUT_MS 10000     /* a request head must arrive within this */
#define CONNECT_TIMEOUT_MS 10000
#define STOP_GRACE_MS 2000        /* open connections get this long to log */
/* Allowed connections are all logged up to a cap well above the default
 * connection limit; refusals have a cap of their own, so a flood of them
 * cannot push an allowed connection out of the log. */
#define LOG_ALLOWED_MAX 20000
#define LOG_REFUSED_MAX 2000
#define LOG_BYTES_MAX (16u << 20)
#define SLOTS_MAX 256

typedef struct server {
    const al_net_policy *p;
    int log_fd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t active, total;
    _Atomic uint64_t bytes;
    size_t logged_allowed, logged_refused, dropped;
    bool stopping;
    int cfd[SLOTS_MAX], ufd[SLOTS_MAX];
} server;

typedef struct conn {
    server *s;
    int slot, cfd, ufd;
    uint64_t start, last;
    char host[256];
    uint16_t port;
    char addr[INET6_ADDRSTRLEN + 8];
    uint64_t up, down;
    const char *decision;
    char reason[384];
    char buf[AL_REQ_HEAD_MAX + 1];
    size_t len;
} conn;

static void log_conn(server *s, conn *c) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40], stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when, sizeof when, "%s.%03ldZ", stamp, ts.tv_nsec / 1000000);
    json_t *rec = json_pack("{s:s, s:s, s:i, s:s?, s:s, s:s?, s:I, s:I, s:I}", "time", when, "host", c->host,
                            "port", (int)c->port, "address", c->addr[0] ? c->addr : NULL, "decision", c->decision,
                            "reason", c->reason[0] ? c->reason : NULL, "bytes_up", (json_int_t)c->up,
                            "bytes_down", (json_int_t)c->down, "duration_ms",
                            (json_int_t)(al_now_ms() - c->start));
    char *line = rec ? json_dumps(rec, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(rec);
    bool allowed = strcmp(c->decision, "allowed") == 0;
    pthread_mutex_lock(&s->mu);
    size_t *count = allowed ? &s->logged_allowed : &s->logged_refused;
    if (line && *count < (allowed ? LOG_ALLOWED_MAX : LOG_REFUSED_MAX)) {
        size_t n = strlen(line);
        line[n] = '\n';
        al_write_all(s->log_fd, line, n + 1);
        line[n] = '\0';
        (*count)++;
    } else {
        s->dropped++;
    }
    pthread_mutex_unlock(&s->mu);
    free(line);
}

static int send_all(int fd, const void *buf, size_t n, uint64_t deadline) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        uint64_t now = al_now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        struct pollfd pf = { .fd = fd, .events = POLLOUT };
        if (poll(&pf, 1, (int)(deadline - now)) == 0)
            return -ETIMEDOUT;
    }
    return 0;
}

/* A short answer a person or an agent can read, then the end. */
static void reply(conn *c, int code, const char *status, const char *decision, const char *why) {
    char msg[768];
    int body = snprintf(msg, sizeof msg, "airlock egress proxy: %s\n", why);
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"
                      "Connection: close\r\nX-Airlock-Network: %s\r\n\r\n",
                      code, status, body, al_net_mode_name(c->s->p->mode));
    uint64_t dl = al_now_ms() + 2000;
    if (send_all(c->cfd, head, (size_t)hl, dl) == 0)
        send_all(c->cfd, msg, (size_t)body, dl);
    c->decision = decision;
    snprintf(c->reason, sizeof c->reason, "%s", why);
}

/* Read until the request head is complete; 0, or <0 after answering. */
static int read_head(conn *c, al_proxy_req *req) {
    uint64_t deadline = c->start + HEAD_TIMEOUT_MS;
    for (;;) {
        const char *why = NULL;
        int r = al_proxy_req_parse(c->buf, c->len, req, &why);
        if (r == 0)
            return 0;
        if (r == -EINVAL) {
            reply(c, 400, "Bad Request", "denied", why);
            return r;
        }
        if (r == -EPROTONOSUPPORT) {
            reply(c, 400, "Bad Request", "denied", why);
            return r;
        }
        if (c->len >= AL_REQ_HEAD_MAX) {
            reply(c, 431, "Request Header Fields Too Large", "denied", "the request head is larger than 8 KiB");
            return -E2BIG;
        }
        uint64_t now = al_now_ms();
        struct pollfd pf = { .fd = c->cfd, .events = POLLIN };
        if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) <= 0) {
            reply(c, 408, "Request Timeout", "denied", "no complete request within 10 s");
            return -ETIMEDOUT;
        }
        ssize_t n = recv(c->cfd, c->buf + c->len, AL_REQ_HEAD_MAX - c->len, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0) {
            c->decision = "denied";
            snprintf(c->reason, sizeof c->reason, "the client closed before a complete request");
            return -EPIPE;
        }
        c->len += (size_t)n;
    }
}

static void fmt_addr(const struct sockaddr *sa, char *buf, size_t n) {
    char a[INET6_ADDRSTRLEN] = "";
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, a, sizeof a);
    else
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, a, sizeof a);
    snprintf(buf, n, "%s", a);
}

static int connect_to(const struct sockaddr *sa, int *ret_fd) {
    socklen_t len = sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* an IPv6 socket never reaches IPv4 through a mapped address */
    int one = 1;
    if (sa->sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (connect(fd, sa, len) < 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return -e;
    }
    struct pollfd pf = { .fd = fd, .events = POLLOUT };
    int e = 0;
    socklen_t el = sizeof e;
    if (poll(&pf, 1, CONNECT_TIMEOUT_MS) <= 0)
        e = ETIMEDOUT;
    else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
        e = errno;
    if (e) {
        close(fd);
        return -e;
    }
    *ret_fd = fd;
    return 0;
}

/* The single addresses (a /32 or /128 range) the registry NAME was given,
 * port PORT, into RET: how many. */
static size_t pinned(const al_net_policy *p, const char *name, uint16_t port, al_resolved *ret) {
    size_t nr = 0;
    const al_net_range *r = al_net_registry_ranges(p, name, &nr);
    ret->n = 0;
    for (size_t i = 0; r && i < nr && ret->n < AL_RESOLVE_MAX; i++) {
        if (r[i].family == AF_INET && r[i].bits == 32) {
            struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(port) };
            memcpy(&s.sin_addr, r[i].addr, 4);
            memcpy(&ret->addr[ret->n++], &s, sizeof s);
        } else if (r[i].family == AF_INET6 && r[i].bits == 128) {
            struct sockaddr_in6 s = { .sin6_family = AF_INET6, .sin6_port = htons(port) };
            memcpy(&s.sin6_addr, r[i].addr, 16);
            memcpy(&ret->addr[ret->n++], &s, sizeof s);
        }
    }
    return ret->n;
}

/* Resolve (names only), refuse what is not public (or, for a registry
 * given ranges, not within them), connect to the address that was
 * checked. 0, or <0 after answering. */
static int open_upstream(conn *c, const al_host *h) {
    const al_net_policy *p = c->s->p;
    al_resolved res = { 0 };
    if (h->kind == AL_HOST_IPV4) {
        struct sockaddr_in *s = (struct sockaddr_in *)&res.addr[0];
        *s = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(c->port), .sin_addr = h->v4 };
        res.n = 1;
    } else if (h->kind == AL_HOST_IPV6) {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&res.addr[0];
        *s = (struct sockaddr_in6){ .sin6_family = AF_INET6, .sin6_port = htons(c->port), .sin6_addr = h->v6 };
        res.n = 1;
    } else {
        int r = al_resolve(h->name, c->port, p->has_resolver ? &p->resolver : NULL, &res);
        /* a registry the operator gave single addresses (HOST=a.b.c.d/32)
         * is found at them when DNS has no answer (an index on a name of
         * the platform's own, or on this host for a test) */
        if (r < 0 && pinned(p, h->name, c->port, &res) > 0)
            r = 0;
        if (r < 0) {
            char why[320];
            snprintf(why, sizeof why, "%s could not be resolved (%s)", h->name,
                     r == -ENOENT ? "no such name or no address" : strerror(-r));
            reply(c, 502, "Bad Gateway", "error", why);
            return r;
        }
    }
    /* every address is checked; only public ones are tried, in order */
    const char *first_why = NULL;
    char first_addr[INET6_ADDRSTRLEN] = "";
    int last = -ENOENT;
    for (size_t i = 0; i < res.n; i++) {
        const struct sockaddr *sa = (const struct sockaddr *)&res.addr[i];
        const char *w = al_net_dest_denied(p, h->kind == AL_HOST_NAME ? h->name : NULL, sa);
        if (w) {
            if (!first_why) {
                first_why = w;
                fmt_addr(sa, first_addr, sizeof first_addr);
            }
            continue;
        }
        fmt_addr(sa, c->addr, sizeof c->addr);
        int fd = -1;
        if ((last = connect_to(sa, &fd)) == 0) {
            pthread_mutex_lock(&c->s->mu);
            c->s->ufd[c->slot] = c->ufd = fd;
            bool stop = c->s->stopping;
            pthread_mutex_unlock(&c->s->mu);
            if (stop)
                return -ECANCELED;
            return 0;
        }
    }
    char why[384];
    if (last == -ENOENT && first_why) {
        snprintf(c->addr, sizeof c->addr, "%s", first_addr);
        /* a registry with ranges is held to them, every other name to the
         * public-address rule: the words say which */
        size_t nr = 0;
        al_net_registry_ranges(p, h->kind == AL_HOST_NAME ? h->name : NULL, &nr);
        snprintf(why, sizeof why, "network policy \"%s\": %s resolves to %s, which is %s: %s",
                 al_net_mode_name(p->mode), h->kind == AL_HOST_NAME ? h->name : c->host, first_addr,
                 nr ? "refused" : "not public", first_why);
        reply(c, 403, "Forbidden", "denied", why);
        return -EACCES;
    }
    snprintf(why, sizeof why, "could not connect to %s port %u: %s", c->addr[0] ? c->addr : c->host, c->port,
             strerror(-last));
    reply(c, 502, "Bad Gateway", "error", why);
    return last;
}

/* Count bytes against the run's budget; false when it is spent. */
static bool spend(conn *c, size_t n) {
    uint64_t before = atomic_fetch_add(&c->s->bytes, n);
    return before + n <= c->s->p->max_bytes;
}

/* Take up to N bytes of the run's budget: what is left of it, at most N. */
static size_t reserve(conn *c, size_t n) {
    uint64_t cur = atomic_load(&c->s->bytes), max = c->s->p->max_bytes;
    for (;;) {
        if (cur >= max)
            return 0;
        size_t take = max - cur < n ? (size_t)(max - cur) : n;
        if (atomic_compare_exchange_weak(&c->s->bytes, &cur, cur + take))
            return take;
    }
}

/* One direction of a relay: bytes move socket -> pipe -> socket with
 * splice, so the proxy never copies them through its own memory. */
typedef struct leg {
    int from, to, pipe[2];
    size_t held;                  /* in the pipe, not yet written */
    bool eof;
    bool stalled;                 /* the pipe took nothing: wait for it to drain */
    uint64_t *count;
} leg;

#define LEG_PIPE (1u << 20)

/* Copy both ways until both sides are done, the connection idles, its
 * time is up, or the run's byte budget is spent. */
static void relay(conn *c) {
    const al_net_policy *p = c->s->p;
    leg legs[2] = { { .from = c->cfd, .to = c->ufd, .pipe = { -1, -1 }, .count = &c->up },
                    { .from = c->ufd, .to = c->cfd, .pipe = { -1, -1 }, .count = &c->down } };
    size_t cap = 65536;
    for (int i = 0; i < 2; i++) {
        if (pipe2(legs[i].pipe, O_CLOEXEC | O_NONBLOCK) < 0)
            goto out;
        int sz = fcntl(legs[i].pipe[1], F_SETPIPE_SZ, LEG_PIPE);
        if (sz > 0 && (size_t)sz < cap)
            cap = (size_t)sz;
        else if (sz > 0 && i == 0)
            cap = (size_t)sz;
    }
    uint64_t end = c->start + p->conn_ms;
    bool spent = false;
    while (!(legs[0].eof && legs[0].held == 0 && legs[1].eof && legs[1].held == 0)) {
        /* the budget is spent: what is in the pipes is delivered, then the end */
        if (spent && legs[0].held == 0 && legs[1].held == 0) {
            snprintf(c->reason, sizeof c->reason, "closed: the run's egress budget of %llu bytes is spent",
                     (unsigned long long)p->max_bytes);
            goto out;
        }
        uint64_t now = al_now_ms();
        uint64_t until = c->last + p->idle_ms < end ? c->last + p->idle_ms : end;
        if (now >= until) {
            snprintf(c->reason, sizeof c->reason, "%s", now >= end ? "closed: the connection's time limit"
                                                                    : "closed: idle too long");
            goto out;
        }
        struct pollfd pf[4];
        for (int i = 0; i < 2; i++) {
            leg *l = &legs[i];
            pf[2 * i] = (struct pollfd){ .fd = !spent && !l->eof && !l->stalled && l->held < cap ? l->from : -1,
                                         .events = POLLIN };
            pf[2 * i + 1] = (struct pollfd){ .fd = l->held > 0 ? l->to : -1, .events = POLLOUT };
        }
        int k = poll(pf, 4, (int)(until - now));
        if (k < 0 && errno != EINTR)
            goto out;
        for (int i = 0; i < 2 && k > 0; i++) {
            leg *l = &legs[i];
            if (pf[2 * i].revents && !spent) {
                /* bytes are taken from the budget before they are read, so
                 * exactly the budget is delivered and no more */
                size_t want = reserve(c, cap - l->held);
                if (want == 0) {
                    spent = true;
                    continue;
                }
                ssize_t n = splice(l->from, NULL, l->pipe[1], NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if ((size_t)(n > 0 ? n : 0) < want)
                    atomic_fetch_sub(&c->s->bytes, want - (size_t)(n > 0 ? n : 0));
                if (n > 0) {
                    l->held += (size_t)n;
                    c->last = al_now_ms();
                } else if (n < 0 && errno == EAGAIN && l->held > 0) {
                    /* the pipe is full by its slots, not its bytes */
                    l->stalled = true;
                } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                    l->eof = true;
                }
            }
            if (pf[2 * i + 1].revents && l->held > 0) {
                ssize_t n = splice(l->pipe[0], NULL, l->to, NULL, l->held, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (n > 0) {
                    l->held -= (size_t)n;
                    l->stalled = false;
                    *l->count += (uint64_t)n;
                    c->last = al_now_ms();
                } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                    goto out; /* the receiver is gone */
                }
            }
            /* one side is done sending and all of it is delivered: pass the
             * half-close on */
            if (l->eof && l->held == 0 && l->to >= 0) {
                shutdown(l->to, SHUT_WR);
                l->to = -1;
            }
        }
    }
out:
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            if (legs[i].pipe[j] >= 0)
                close(legs[i].pipe[j]);
}

/* CONNECT with SNI checking: the first bytes must be a ClientHello naming
 * the host the CONNECT named. They are read before anything is forwarded. */
static int check_sni(conn *c, const char *host) {
    uint32_t wait = c->s->p->idle_ms < HEAD_TIMEOUT_MS ? c->s->p->idle_ms : HEAD_TIMEOUT_MS;
    uint64_t deadline = al_now_ms() + wait;
    static const size_t cap = 16384 + 5;
    if (c->len > cap)
        c->len = cap;
    char *b = malloc(cap);
    if (!b)
        return -ENOMEM;
    memcpy(b, c->buf, c->len);
    size_t len = c->len;
    char name[256];
    int r;
    while ((r = al_tls_sni((const unsigned char *)b, len, name, sizeof name)) == -EAGAIN) {
        uint64_t now = al_now_ms();
        struct pollfd pf = { .fd = c->cfd, .events = POLLIN };
        if (len >= cap || now >= deadline || poll(&pf, 1, (int)(deadline - now)) <= 0) {
            r = -ETIMEDOUT;
            break;
        }
        ssize_t n = recv(c->cfd, b + len, cap - len, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0) {
            r = -EPIPE;
            break;
        }
        len += (size_t)n;
    }
    if (r != 1 || strcmp(name, host) != 0) {
        c->decision = "denied";
        snprintf(c->reason, sizeof c->reason, "%s",
                 r == 1    ? "TLS server name (SNI) differs from the CONNECT host"
                 : r == 0  ? "TLS ClientHello without a server name (SNI)"
                 : r == -EPROTO ? "the tunnel did not start with a TLS ClientHello"
                 : r == -EINVAL ? "the TLS server name (SNI) is not a host name (an address, an empty label or a "
                                  "trailing dot)"
                               : "no TLS ClientHello in time");
        if ((r == 1 || (r == -EINVAL && name[0])) && strlen(c->reason) + strlen(name) + 4 < sizeof c->reason)
            snprintf(c->reason + strlen(c->reason), sizeof c->reason - strlen(c->reason), ": %s", name);
        free(b);
        return -EACCES;
    }
    int s = spend(c, len) ? send_all(c->ufd, b, len, al_now_ms() + c->s->p->idle_ms) : -ENOSPC;
    if (s == 0)
        c->up += len;
    free(b);
    return s;
}

static void serve_conn(conn *c) {
    al_proxy_req req;
    if (read_head(c, &req) < 0)
        return;
    if (atomic_load(&c->s->bytes) >= c->s->p->max_bytes) {
        char why[128];
        snprintf(why, sizeof why, "the run's egress budget of %llu bytes is spent",
                 (unsigned long long)c->s->p->max_bytes);
        snprintf(c->host, sizeof c->host, "%s", req.host);
        c->port = req.port;
        reply(c, 429, "Too Many Requests", "denied", why);
        return;
    }
    snprintf(c->host, sizeof c->host, "%s", req.host);
    c->port = req.port;
    al_host h;
    al_host_parse(req.host, &h);
    /* the log names what was decided on: the normalised name or address */
    if (h.kind == AL_HOST_NAME)
        snprintf(c->host, sizeof c->host, "%s", h.name);
    else if (h.kind == AL_HOST_IPV4)
        inet_ntop(AF_INET, &h.v4, c->host, sizeof c->host);
    else if (h.kind == AL_HOST_IPV6)
        inet_ntop(AF_INET6, &h.v6, c->host, sizeof c->host);
    char why[384];
    /* the decision comes before any lookup: a denied name is never resolved */
    if (!al_net_decide(c->s->p, &h, req.port, why, sizeof why)) {
        reply(c, 403, "Forbidden", "denied", why);
        return;
    }
    if (!req.connect && !al_net_plain_http_ok(c->s->p, &h, why, sizeof why)) {
        reply(c, 403, "Forbidden", "denied", why);
        return;
    }
    const char *rest = c->buf + req.head_len;
    size_t rest_len = c->len - req.head_len;
    if (req.connect && al_proxy_looks_like_request(rest, rest_len)) {
        reply(c, 400, "Bad Request", "denied", "a second request pipelined after CONNECT");
        return;
    }
    if (open_upstream(c, &h) < 0)
        return;
    c->decision = "allowed";
    c->last = al_now_ms();
    if (req.connect) {
        static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        if (send_all(c->cfd, ok, sizeof ok - 1, al_now_ms() + 2000) < 0)
            return;
        memmove(c->buf, rest, rest_len);
        c->len = rest_len;
        if (c->s->p->sni_check && check_sni(c, h.name) < 0)
            return;
        if (!c->s->p->sni_check && c->len > 0) {
            if (!spend(c, c->len) || send_all(c->ufd, c->buf, c->len, al_now_ms() + 2000) < 0)
                return;
            c->up += c->len;
        }
    } else {
        /* origin form, our Host (the authority that was checked), the
         * client's other end-to-end headers, and one request only */
        size_t cap = req.head_len + AL_REQ_REWRITE_EXTRA;
        char *out = malloc(cap);
        if (!out)
            return;
        ssize_t o = al_proxy_req_rewrite(c->buf, &req, out, cap);
        int s = o > 0 && spend(c, (size_t)o + rest_len) ? send_all(c->ufd, out, (size_t)o, al_now_ms() + 2000) : -ENOSPC;
        free(out);
        if (s < 0 || (rest_len && send_all(c->ufd, rest, rest_len, al_now_ms() + 2000) < 0))
            return;
        c->up += (size_t)o + rest_len;
    }
    relay(c);
}

static void *conn_thread(void *arg) {
    conn *c = arg;
    server *s = c->s;
    serve_conn(c);
    if (!c->decision)
        c->decision = "denied";
    log_conn(s, c);
    pthread_mutex_lock(&s->mu);
    s->cfd[c->slot] = s->ufd[c->slot] = -1;
    s->active--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    close(c->cfd);
    if (c->ufd >= 0)
        close(c->ufd);
    free(c);
    return NULL;
}

/* Refused before a thread is spent on it: the limits on connections. */
static void refuse(server *s, int fd, const char *why) {
    conn c = { .s = s, .cfd = fd, .ufd = -1, .start = al_now_ms() };
    snprintf(c.host, sizeof c.host, "-");
    reply(&c, 429, "Too Many Requests", "denied", why);
    log_conn(s, &c);
    close(fd);
}

int al_proxy_serve(const al_net_policy *p, int listen_fd, int log_fd, int stop_fd) {
    server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->p = p;
    s->log_fd = log_fd;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    for (int i = 0; i < SLOTS_MAX; i++)
        s->cfd[i] = s->ufd[i] = -1;
    uint32_t max_open = p->max_conns < SLOTS_MAX ? p->max_conns : SLOTS_MAX;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 512 * 1024);
    fcntl(listen_fd, F_SETFL, O_NONBLOCK);
    for (;;) {
        struct pollfd pf[2] = { { .fd = listen_fd, .events = POLLIN }, { .fd = stop_fd, .events = POLLIN } };
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[1].revents)
            break;
        if (!(pf[0].revents & POLLIN))
            continue;
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&s->mu);
        bool full = s->active >= max_open, spent = s->total >= p->max_conns_total;
        int slot = -1;
        for (int i = 0; !full && !spent && i < SLOTS_MAX && slot < 0; i++)
            if (s->cfd[i] < 0)
                slot = i;
        if (slot >= 0) {
            s->cfd[slot] = fd;
            s->active++;
            s->total++;
        }
        pthread_mutex_unlock(&s->mu);
        if (slot < 0) {
            char why[128];
            if (spent)
                snprintf(why, sizeof why, "the run's limit of %u connections is reached", p->max_conns_total);
            else
                snprintf(why, sizeof why, "the run's limit of %u open connections is reached", max_open);
            refuse(s, fd, why);
            continue;
        }
        conn *c = calloc(1, sizeof *c);
        pthread_t t;
        if (c) {
            *c = (conn){ .s = s, .slot = slot, .cfd = fd, .ufd = -1, .start = al_now_ms() };
            snprintf(c->host, sizeof c->host, "-");
        }
        if (!c || pthread_create(&t, &attr, conn_thread, c) != 0) {
            free(c);
            pthread_mutex_lock(&s->mu);
            s->cfd[slot] = -1;
            s->active--;
            pthread_mutex_unlock(&s->mu);
            refuse(s, fd, "the proxy is out of resources");
        }
    }
    /* stopping: wake every connection so that it ends and logs */
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (int i = 0; i < SLOTS_MAX; i++) {
        if (s->cfd[i] >= 0)
            shutdown(s->cfd[i], SHUT_RDWR);
        if (s->ufd[i] >= 0)
            shutdown(s->ufd[i], SHUT_RDWR);
    }
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += STOP_GRACE_MS / 1000;
    while (s->active > 0)
        if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) != 0)
            break;
    bool done = s->active == 0;
    /* the last line: how many records did not fit */
    char tail[64];
    int tl = snprintf(tail, sizeof tail, "{\"dropped\":%zu}\n", s->dropped + s->active);
    al_write_all(s->log_fd, tail, (size_t)tl);
    pthread_mutex_unlock(&s->mu);
    pthread_attr_destroy(&attr);
    /* with threads still running, s stays: the process exits next */
    if (done)
        free(s);
    return 0;
}

struct al_proxy {
    pid_t pid;
    int pidfd, stop_w, log_fd;
};

/* This host's addresses and gateways, which a "public" destination must
 * not be: the proxy runs on the host, so they would reach its services. */
static void add_host_addresses(al_net_policy *p) {
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) == 0) {
        for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
            if (i->ifa_addr)
                al_net_policy_add_local(p, i->ifa_addr);
        freeifaddrs(ifa);
    }
    FILE *f = fopen("/proc/net/route", "re");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        char ifn[32];
        unsigned dst, gw, flags;
        if (sscanf(line, "%31s %x %x %x", ifn, &dst, &gw, &flags) == 4 && gw != 0) {
            struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = gw };
            al_net_policy_add_local(p, (struct sockaddr *)&sin);
        }
    }
    if (f)
        fclose(f);
    f = fopen("/proc/net/ipv6_route", "re");
    while (f && fgets(line, sizeof line, f)) {
        char d[33], s_[33], nh[33];
        unsigned dl, sl;
        if (sscanf(line, "%32s %x %32s %x %32s", d, &dl, s_, &sl, nh) == 5 && strspn(nh, "0") != 32) {
            struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6 };
            for (int k = 0; k < 16; k++) {
                unsigned b;
                sscanf(nh + 2 * k, "%2x", &b);
                sin6.sin6_addr.s6_addr[k] = (uint8_t)b;
            }
            al_net_policy_add_local(p, (struct sockaddr *)&sin6);
        }
    }
    if (f)
        fclose(f);
}

int al_proxy_start(const al_net_policy *policy, int listen_fd, uid_t uid, gid_t gid, al_proxy **ret, al_error *err) {
    _cleanup_close_ int log_fd = (int)syscall(SYS_memfd_create, "airlock-egress", MFD_CLOEXEC);
    if (log_fd < 0)
        return al_err(err, "proxy", errno, "memfd_create: %m");
    int stop[2];
    if (pipe2(stop, O_CLOEXEC) < 0)
        return al_err(err, "proxy", errno, "pipe: %m");
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(stop[0]);
        close(stop[1]);
        return al_err(err, "proxy", e, "fork the egress proxy: %m");
    }
    if (pid == 0) {
        /* only what the proxy needs stays open; stderr stays for sanitizer
         * reports, stdout (the helper's event stream) does not */
        int keep[] = { listen_fd, log_fd, stop[0] };
        int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        for (unsigned fd = 3; fd < 65536; fd++) {
            bool k = false;
            for (size_t i = 0; i < 3; i++)
                k |= keep[i] == (int)fd;
            if (!k) {
                unsigned next = 65536;
                for (size_t i = 0; i < 3; i++)
                    if (keep[i] > (int)fd && (unsigned)keep[i] < next)
                        next = (unsigned)keep[i];
                syscall(SYS_close_range, fd, next == 65536 ? ~0U : next - 1, 0);
                fd = next;
            }
        }
        prctl(PR_SET_NAME, "airlock-proxy");
        if (geteuid() == 0 && (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0))
            _exit(126);
        /* after the last credential change, which would clear it */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(0);
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        signal(SIGPIPE, SIG_IGN);
        al_net_policy *own = malloc(sizeof *own);
        if (!own)
            _exit(1);
        *own = *policy;
        add_host_addresses(own);
        _exit(al_proxy_serve(own, listen_fd, log_fd, stop[0]) < 0 ? 1 : 0);
    }
    close(stop[0]);
    al_proxy *px = calloc(1, sizeof *px);
    if (!px) {
        close(stop[1]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return al_err(err, "proxy", ENOMEM, "out of memory");
    }
    *px = (al_proxy){ .pid = pid, .pidfd = (int)syscall(SYS_pidfd_open, pid, 0), .stop_w = stop[1],
                      .log_fd = TAKE_FD(log_fd) };
    *ret = px;
    return 0;
}

json_t *al_proxy_stop(al_proxy *px, size_t *ret_dropped) {
    *ret_dropped = 0;
    if (!px)
        return json_array();
    close(px->stop_w);
    struct pollfd pf = { .fd = px->pidfd, .events = POLLIN };
    if (px->pidfd < 0 || poll(&pf, 1, STOP_GRACE_MS + 1000) <= 0)
        kill(px->pid, SIGKILL);
    waitpid(px->pid, NULL, 0);
    if (px->pidfd >= 0)
        close(px->pidfd);
    json_t *log = json_array();
    off_t size = lseek(px->log_fd, 0, SEEK_END);
    char *buf = size > 0 && size <= (off_t)LOG_BYTES_MAX ? malloc((size_t)size + 1) : NULL;
    if (buf && pread(px->log_fd, buf, (size_t)size, 0) == size) {
        buf[size] = '\0';
        for (char *line = buf, *nl; *line; line = nl + 1) {
            nl = strchr(line, '\n');
            if (!nl)
                break;
            *nl = '\0';
            json_t *rec = json_loads(line, 0, NULL);
            if (rec && json_object_size(rec) == 1 && json_is_integer(json_object_get(rec, "dropped")))
                *ret_dropped += (size_t)json_integer_value(json_object_get(rec, "dropped"));
            else if (rec)
                json_array_append(log, rec);
            else
                (*ret_dropped)++;
            json_decref(rec);
        }
    }
    free(buf);
    close(px->log_fd);
    free(px);
    return log;
}
