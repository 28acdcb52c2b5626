/*
 * airlock mcp --local: MCP over stdio with no service to set up. It starts
 * a private `airlock serve` on a loopback socket it binds itself and hands
 * over (so no other local user can take the port between a check and the
 * bind, answer as the service and be sent the key), on a state directory
 * of its own, with a tenant and key of its own, and forwards to it as
 * `airlock mcp --url` does. So the tools, artifacts, DLP and the rest are
 * exactly the service's (no second implementation), and threads persist
 * in the state directory from one agent session to the next.
 *
 * The private service dies with us (PDEATHSIG), and one state directory
 * serves one `airlock mcp --local` at a time (a lock), since two services on
 * one store would each take the other's running runs for lost.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "../store/store.h"
#include "cli.h"
#include "../store/tenants.h"

#define KEY_FILE "mcp-local.key"
#define LOCK_FILE "mcp-local.lock"
#define PERSON_NAME "mcp-local"
#define START_TIMEOUT_MS 20000

/* A key for the local person: the one kept in STATE/mcp-local.key while it
 * still opens the store, else a new one (and the tenant, the first time). */
static int local_key(const char *state, char *ret_key, size_t len, al_error *err) {
    char db[PATH_MAX + 16], kf[PATH_MAX + 16];
    snprintf(db, sizeof db, "%s/airlock.db", state);
    snprintf(kf, sizeof kf, "%s/" KEY_FILE, state);
    al_store *s = NULL;
    int r = al_store_open(db, &s, err);
    if (r < 0)
        return r;
    _cleanup_free_ char *kept = NULL;
    al_principal p;
    if (al_read_small(AT_FDCWD, kf, 256, &kept, NULL) == 0) {
        kept[strcspn(kept, "\r\n")] = '\0';
        if (al_store_authenticate(s, kept, &p, err) > 0 && strlen(kept) < len) {
            snprintf(ret_key, len, "%s", kept);
            al_store_close(s);
            return 0;
        }
    }
    char person[40] = "", ws[40] = "", org[40], key[128], key_id[40];
    if (al_store_person_named(s, PERSON_NAME, person, err) <= 0) {
        person[0] = '\0';
        if (al_store_first_workspace(s, ws, err) <= 0)
            ws[0] = '\0';
        if (!ws[0] && ((r = al_store_create_org(s, "local", org, err)) < 0 ||
                       (r = al_store_create_workspace(s, org, "local", ws, err)) < 0)) {
            al_store_close(s);
            return r;
        }
        /* an admin: the one person of this store, who also approves and
         * changes its settings */
        if ((r = al_store_create_person(s, ws, PERSON_NAME, "admin", person, err)) < 0) {
            al_store_close(s);
            return r;
        }
    }
    r = al_store_create_key(s, person, key, key_id, err);
    al_store_close(s);
    if (r < 0)
        return r;
    _cleanup_close_ int fd = open(kf, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || al_write_all(fd, key, strlen(key)) < 0 || al_write_all(fd, "\n", 1) < 0)
        return al_err(err, "state", errno, "write %s: %m", kf);
    snprintf(ret_key, len, "%s", key);
    return 0;
}

/* A socket listening on a free loopback port, and the port; -1 on failure.
 * Kept bound from here on: the service is handed this very socket. */
static int listen_socket(int *ret_port) {
    _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t sl = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
        return -1;
    *ret_port = ntohs(sa.sin_port);
    return TAKE_FD(fd);
}

static bool healthy(const char *url) {
    CURL *h = curl_easy_init();
    if (!h)
        return false;
    FILE *devnull = fopen("/dev/null", "we");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 1000L);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, devnull);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    if (devnull)
        fclose(devnull);
    return status == 200;
}

int cli_mcp_local(const char *state, char *ret_url, size_t url_len, char *ret_key, size_t key_len, pid_t *ret_pid,
                  int *ret_lock_fd) {
    if (mkdir(state, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "airlock mcp: mkdir %s: %s\n", state, strerror(errno));
        return 125;
    }
    char lf[PATH_MAX + 16];
    snprintf(lf, sizeof lf, "%s/" LOCK_FILE, state);
    int lock = open(lf, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) < 0) {
        fprintf(stderr, "airlock mcp: %s is in use by another airlock mcp --local (give another --state)\n", state);
        if (lock >= 0)
            close(lock);
        return 125;
    }
    al_error err = { 0 };
    if (local_key(state, ret_key, key_len, &err) < 0) {
        fprintf(stderr, "airlock mcp: %s: %s\n", err.step, err.msg);
        close(lock);
        return 125;
    }
    int port = 0;
    int lfd = listen_socket(&port);
    if (lfd < 0) {
        fprintf(stderr, "airlock mcp: no free loopback port: %s\n", strerror(errno));
        close(lock);
        return 125;
    }
    char listen[32];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "airlock mcp: fork: %s\n", strerror(errno));
        close(lfd);
        close(lock);
        return 125;
    }
    if (pid == 0) {
        /* the private service: dies with us; its logs go to our stderr,
         * never to stdout, which carries only the protocol */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(125);
        int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(2, 1) < 0)
            _exit(125);
        /* the listening socket, as fd 3 without close-on-exec */
        if (lfd == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(lfd, 3) < 0)
            _exit(125);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execl("/proc/self/exe", "airlock-server", "serve", "--listen", listen, "--listen_fd", "3", "--state", state,
              (char *)NULL);
        _exit(127);
    }
    close(lfd);
    snprintf(ret_url, url_len, "http://%s", listen);
    char health[64];
    snprintf(health, sizeof health, "http://%s/healthz", listen);
    uint64_t deadline = al_now_ms() + START_TIMEOUT_MS;
    while (!healthy(health)) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "airlock mcp: the local service exited at start (see its log above)\n");
            close(lock);
            return 125;
        }
        if (al_now_ms() > deadline) {
            fprintf(stderr, "airlock mcp: the local service did not answer in %d s\n", START_TIMEOUT_MS / 1000);
            kill(pid, SIGTERM);
            waitpid(pid, NULL, 0);
            close(lock);
            return 125;
        }
        struct timespec ts = { .tv_nsec = 50 * 1000000L };
        nanosleep(&ts, NULL);
    }
    *ret_pid = pid;
    *ret_lock_fd = lock;
    return 0;
}
