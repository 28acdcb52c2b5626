/* The Docker Engine API client: see engine.h. */
#include "engine.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* a call that takes longer is a daemon that is stuck: the run fails clearly */
#define CALL_TIMEOUT_S 120L
/* an image's tar can be large; its import is given longer */
#define IMPORT_TIMEOUT_S 1800L
#define HEADER_MAX 8192

int al_engine_socket_path(const char *configured, char *ret, size_t len, al_error *err) {
    const char *host = getenv("DOCKER_HOST");
    const char *path = NULL;
    if (host && *host) {
        if (strncmp(host, "unix://", 7) != 0)
            return al_err(err, "docker", EPROTONOSUPPORT,
                          "DOCKER_HOST=%s: airlock talks only to a daemon on this host, on its unix:// socket "
                          "(access to it is root on that host)", host);
        path = host + 7;
    } else if (configured && *configured) {
        path = configured;
    } else {
        path = "/var/run/docker.sock";
    }
    if (!*path || strlen(path) >= len || strlen(path) >= 108)
        return al_err(err, "docker", ENAMETOOLONG, "the Docker socket path is empty or too long: %s", path);
    snprintf(ret, len, "%s", path);
    return 0;
}

static int version_num(const char *v) {
    int maj = 0, min = 0;
    return sscanf(v, "%d.%d", &maj, &min) == 2 ? maj * 1000 + min : -1;
}

/* every socket close-on-exec: the daemon's connection is root on this host */
static curl_socket_t open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a) {
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/* The time a call (or a wait of one, MAX_MS at most) is given: MAX_MS, or
 * what is left until E's until_ms, AL_ENGINE_FLOOR_MS at least (a stuck
 * daemon's, AL_ENGINE_STUCK_MS). */
static long call_ms(const al_engine *e, long max_ms) {
    if (!e->until_ms)
        return max_ms;
    if (e->stuck)
        return AL_ENGINE_STUCK_MS < max_ms ? AL_ENGINE_STUCK_MS : max_ms;
    uint64_t now = al_now_ms();
    long left = e->until_ms > now ? (long)(e->until_ms - now) : 0;
    if (left < AL_ENGINE_FLOOR_MS)
        left = AL_ENGINE_FLOOR_MS;
    return left < max_ms ? left : max_ms;
}

static void setup(al_engine *e, CURL *c) {
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, e->socket);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, call_ms(e, CALL_TIMEOUT_S * 1000));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, call_ms(e, 10000));
    /* only the socket: a redirect or a proxy from the environment is not
     * followed anywhere */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
}

static int perform(al_engine *e, CURL *c, al_buf *a, json_t **ret, al_error *err) {
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, al_buf_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK)
        e->stuck = false;
    if (cc != CURLE_OK) {
        if (a->over)
            return al_err(err, "docker", EMSGSIZE, "the daemon's answer exceeded %u bytes", AL_ENGINE_ANSWER_MAX);
        if (cc == CURLE_OPERATION_TIMEDOUT)
            e->stuck = true;
        return al_err(err, "docker", cc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : ECONNREFUSED,
                      "the Docker daemon at %s: %s", e->socket, ebuf[0] ? ebuf : curl_easy_strerror(cc));
    }
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    json_t *doc = a->len ? json_loadb(a->buf, a->len, JSON_DECODE_ANY, NULL) : NULL;
    if (status >= 400) {
        const char *m = json_string_value(json_object_get(doc, "message"));
        al_err(err, "docker", status == 404 ? ENOENT : status == 409 ? EEXIST : EIO, "Docker answered %ld: %.300s",
               status, m ? m : a->buf ? a->buf : "");
    }
    if (ret)
        *ret = doc;
    else
        json_decref(doc);
    return (int)status;
}

int al_engine_call(al_engine *e, const char *method, const char *path, json_t *body, json_t **ret, al_error *err) {
    if (ret)
        *ret = NULL;
    CURL *c = e->curl;
    setup(e, c);
    char url[4096];
    /* the version prefix, once negotiated; /version and /_ping go bare */
    if (e->version[0])
        snprintf(url, sizeof url, "http://docker/v%s%s", e->version, path);
    else
        snprintf(url, sizeof url, "http://docker%s", path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    struct curl_slist *hdr = NULL;
    if (body && !text)
        return -ENOMEM;
    if (text) {
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
    }
    al_buf a = { .max = AL_ENGINE_ANSWER_MAX };
    int r = perform(e, c, &a, ret, err);
    curl_slist_free_all(hdr);
    free(a.buf);
    return r;
}

static size_t read_fd(char *p, size_t size, size_t n, void *ud) {
    int fd = *(int *)ud;
    for (;;) {
        ssize_t k = read(fd, p, size * n);
        if (k >= 0)
            return (size_t)k;
        if (errno != EINTR)
            return CURL_READFUNC_ABORT;
    }
}

int al_engine_post_fd(al_engine *e, const char *path, int fd, const char *content_type, json_t **ret,
                      al_error *err) {
    if (ret)
        *ret = NULL;
    CURL *c = e->curl;
    setup(e, c);
    char url[4096], ct[200];
    snprintf(url, sizeof url, "http://docker/v%s%s", e->version, path);
    snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
    struct curl_slist *hdr = curl_slist_append(NULL, ct);
    hdr = curl_slist_append(hdr, "Expect:");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, read_fd);
    curl_easy_setopt(c, CURLOPT_READDATA, &fd);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, IMPORT_TIMEOUT_S);
    al_buf a = { .max = AL_ENGINE_ANSWER_MAX };
    int r = perform(e, c, &a, NULL, err);
    /* an import answers a stream of JSON progress lines: the last says
     * how it ended ({"status": "sha256:..."} or {"error": ...}) */
    if (r >= 0 && ret && a.buf) {
        char *last = NULL;
        for (char *line = strtok(a.buf, "\r\n"); line; line = strtok(NULL, "\r\n"))
            last = line;
        *ret = last ? json_loads(last, 0, NULL) : NULL;
    }
    curl_slist_free_all(hdr);
    free(a.buf);
    return r;
}

char *al_engine_escape(al_engine *e, const char *s) {
    char *q = curl_easy_escape(e->curl, s, 0);
    char *out = q ? strdup(q) : NULL;
    curl_free(q);
    return out;
}

int al_engine_open(al_engine *e, const char *socket_path, al_error *err) {
    memset(e, 0, sizeof *e);
    if (strlen(socket_path) >= sizeof e->socket)
        return al_err(err, "docker", ENAMETOOLONG, "socket path too long");
    snprintf(e->socket, sizeof e->socket, "%s", socket_path);
    /* a socket, not a file that someone named so */
    struct stat st;
    if (stat(socket_path, &st) < 0)
        return al_err(err, "docker", errno, "no Docker daemon socket at %s: %m", socket_path);
    if (!S_ISSOCK(st.st_mode))
        return al_err(err, "docker", ENOTSOCK, "%s is not a socket", socket_path);
    e->curl = curl_easy_init();
    if (!e->curl)
        return al_err(err, "docker", ENOMEM, "curl_easy_init failed");
    json_t *v = NULL;
    int r = al_engine_call(e, "GET", "/version", NULL, &v, err);
    if (r >= 0 && r != 200)
        r = al_err(err, "docker", EPROTO, "GET /version answered %d", r);
    const char *api = json_string_value(json_object_get(v, "ApiVersion"));
    if (r >= 0 && !api)
        r = al_err(err, "docker", EPROTO, "GET /version named no ApiVersion");
    if (r >= 0 && version_num(api) < version_num(AL_ENGINE_API_MIN))
        r = al_err(err, "docker", EPROTONOSUPPORT, "the daemon speaks API %s; airlock needs at least %s", api,
                   AL_ENGINE_API_MIN);
    if (r >= 0) {
        snprintf(e->version, sizeof e->version, "%s",
                 version_num(api) < version_num(AL_ENGINE_API) ? api : AL_ENGINE_API);
        snprintf(e->daemon, sizeof e->daemon, "%s", json_string_value(json_object_get(v, "Version")) ?: "?");
        snprintf(e->os, sizeof e->os, "%s", json_string_value(json_object_get(v, "Os")) ?: "?");
        snprintf(e->kernel, sizeof e->kernel, "%s", json_string_value(json_object_get(v, "KernelVersion")) ?: "?");
    }
    json_decref(v);
    if (r < 0) {
        al_engine_close(e);
        return r;
    }
    if (strcmp(e->os, "linux") != 0) {
        al_engine_close(e);
        return al_err(err, "docker", ENOTSUP, "the Docker daemon runs %s containers; airlock needs linux", e->os);
    }
    return 0;
}

void al_engine_close(al_engine *e) {
    if (e->curl)
        curl_easy_cleanup(e->curl);
    e->curl = NULL;
}

/* Wait until FD is ready for EVENTS, at most MS. */
static int wait_fd(int fd, short events, int ms) {
    struct pollfd p = { .fd = fd, .events = events };
    int k;
    do
        k = poll(&p, 1, ms);
    while (k < 0 && errno == EINTR);
    return k < 0 ? -errno : k == 0 ? -ETIMEDOUT : 0;
}

int al_engine_exec_start(al_engine *e, const char *exec_id, al_engine_stream *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    ret->fd = -1;
    CURL *c = curl_easy_init();
    if (!c)
        return al_err(err, "docker", ENOMEM, "curl_easy_init failed");
    setup(e, c);
    /* curl opens the connection; the exchange on it is ours, because the
     * daemon takes it over (hijacks it) after its answer */
    curl_easy_setopt(c, CURLOPT_URL, "http://docker/");
    curl_easy_setopt(c, CURLOPT_CONNECT_ONLY, 1L);
    CURLcode cc = curl_easy_perform(c);
    curl_socket_t fd = CURL_SOCKET_BAD;
    if (cc == CURLE_OK)
        cc = curl_easy_getinfo(c, CURLINFO_ACTIVESOCKET, &fd);
    if (cc != CURLE_OK || fd == CURL_SOCKET_BAD) {
        curl_easy_cleanup(c);
        return al_err(err, "docker", ECONNREFUSED, "connect to %s: %s", e->socket, curl_easy_strerror(cc));
    }
    const char *body = "{\"Detach\":false,\"Tty\":false}";
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v%s/exec/%s/start HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
                     "Connection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: %zu\r\n\r\n%s",
                     e->version, exec_id, strlen(body), body);
    if (n <= 0 || (size_t)n >= sizeof req || strspn(exec_id, "0123456789abcdef") != strlen(exec_id)) {
        curl_easy_cleanup(c);
        return al_err(err, "docker", EINVAL, "bad exec id");
    }
    int r = 0;
    for (size_t off = 0; r == 0 && off < (size_t)n;) {
        ssize_t k = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
        if (k > 0)
            off += (size_t)k;
        else if (k < 0 && errno == EAGAIN)
            r = wait_fd(fd, POLLOUT, (int)call_ms(e, 10000));
        else if (k < 0 && errno != EINTR)
            r = -errno;
    }
    /* the answer's head, byte by byte: what follows it is the stream */
    char head[HEADER_MAX + 1];
    size_t hl = 0;
    while (r == 0 && hl < HEADER_MAX && !(hl >= 4 && memcmp(head + hl - 4, "\r\n\r\n", 4) == 0)) {
        ssize_t k = recv(fd, head + hl, 1, 0);
        if (k == 1)
            hl++;
        else if (k == 0)
            r = -ECONNRESET;
        else if (errno == EAGAIN)
            r = wait_fd(fd, POLLIN, (int)call_ms(e, 30000));
        else if (errno != EINTR)
            r = -errno;
    }
    head[hl] = '\0';
    int status = 0;
    if (r == 0 && (sscanf(head, "HTTP/1.%*d %d", &status) != 1 || (status != 101 && status != 200)))
        r = al_err(err, "docker", EPROTO, "exec start answered: %.200s", head);
    else if (r < 0)
        al_err(err, "docker", -r, "exec start: %s", strerror(-r));
    e->stuck = r == -ETIMEDOUT;
    if (r < 0) {
        curl_easy_cleanup(c);
        return r;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    ret->fd = fd;
    ret->curl = c;
    return 0;
}

int al_engine_stream_read(al_engine_stream *s, void (*on_data)(int stream, const char *buf, size_t len, void *ud),
                          void *ud) {
    char buf[65536];
    for (;;) {
        ssize_t k = recv(s->fd, buf, sizeof buf, 0);
        if (k == 0) {
            s->eof = true;
            return 0;
        }
        if (k < 0)
            return errno == EAGAIN ? 1 : errno == EINTR ? 1 : -errno;
        for (size_t i = 0; i < (size_t)k;) {
            if (s->left == 0) {
                /* the frame header: [stream, 0, 0, 0, size big-endian] */
                s->hdr[s->hdr_len++] = (uint8_t)buf[i++];
                if (s->hdr_len == 8) {
                    s->stream = s->hdr[0];
                    s->left = (uint32_t)s->hdr[4] << 24 | (uint32_t)s->hdr[5] << 16 | (uint32_t)s->hdr[6] << 8 |
                              s->hdr[7];
                    s->hdr_len = 0;
                    if (s->stream != 1 && s->stream != 2 && s->stream != 0)
                        return -EPROTO;
                }
                continue;
            }
            size_t take = (size_t)k - i < s->left ? (size_t)k - i : s->left;
            if (s->stream == 1 || s->stream == 2)
                on_data(s->stream, buf + i, take, ud);
            s->left -= (uint32_t)take;
            i += take;
        }
    }
}

ssize_t al_engine_stream_write(al_engine_stream *s, const void *buf, size_t len) {
    ssize_t k = send(s->fd, buf, len, MSG_NOSIGNAL);
    if (k < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    return k;
}

int al_engine_stream_close_stdin(al_engine_stream *s) { return shutdown(s->fd, SHUT_WR) < 0 ? -errno : 0; }

void al_engine_stream_close(al_engine_stream *s) {
    if (s->curl)
        curl_easy_cleanup(s->curl);
    s->curl = NULL;
    s->fd = -1;
}
