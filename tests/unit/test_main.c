/* Unit tests for the pure logic of libairlock-box. Prints a TAP-like line
 * per check and a "N passed, N failed" summary. */
#include <arpa/inet.h>
#include <string.h>

#include "box/box.h"
#include "box/cgroup.h"
#include "box/seccomp.h"
#include "lang/lang.h"
#include "proxy/addr.h"
#include "service/dlp.h"
#include "util/util.h"

static int passed, failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
        }                                                                                          \
    } while (0)

static void test_sizes(void) {
    uint64_t v = 0;
    CHECK(al_parse_size("512M", &v) == 0 && v == 512ULL << 20);
    CHECK(al_parse_size("64k", &v) == 0 && v == 64ULL << 10);
    CHECK(al_parse_size("1G", &v) == 0 && v == 1ULL << 30);
    CHECK(al_parse_size("1GB", &v) == 0 && v == 1ULL << 30);
    CHECK(al_parse_size("100", &v) == 0 && v == 100);
    CHECK(al_parse_size("", &v) == -EINVAL);
    CHECK(al_parse_size("M", &v) == -EINVAL);
    CHECK(al_parse_size("-1M", &v) == -EINVAL);
    CHECK(al_parse_size("1.5M", &v) == -EINVAL);
    CHECK(al_parse_size("99999999999999999999T", &v) < 0);
    CHECK(al_parse_size("18446744073709551615T", &v) == -ERANGE);
}

static void test_millis(void) {
    uint64_t v = 0;
    CHECK(al_parse_millis("0.5", &v) == 0 && v == 500);
    CHECK(al_parse_millis("2", &v) == 0 && v == 2000);
    CHECK(al_parse_millis("1.25", &v) == 0 && v == 1250);
    CHECK(al_parse_millis(".5", &v) == 0 && v == 500);
    CHECK(al_parse_millis("1.", &v) == -EINVAL);
    CHECK(al_parse_millis("1.2345", &v) == -EINVAL);
    CHECK(al_parse_millis("abc", &v) == -EINVAL);
    CHECK(al_parse_millis("", &v) == -EINVAL);
}

static void test_cgroup_keys(void) {
    uint64_t v = 0;
    const char *events = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n";
    CHECK(al_cgroup_parse_key(events, "oom_kill", &v) == 0 && v == 2);
    CHECK(al_cgroup_parse_key(events, "oom", &v) == 0 && v == 3);
    CHECK(al_cgroup_parse_key(events, "max", &v) == 0 && v == 12);
    CHECK(al_cgroup_parse_key(events, "missing", &v) == -ENOENT);
    /* v1 memory.oom_control */
    const char *oomc = "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n";
    CHECK(al_cgroup_parse_key(oomc, "oom_kill", &v) == 0 && v == 1);
    CHECK(al_cgroup_parse_key("usage_usec 1234\nuser_usec 1000\n", "usage_usec", &v) == 0 && v == 1234);
}

static void test_lang(void) {
    CHECK(al_lang_by_file("analysis.py") == al_lang_by_name("python"));
    CHECK(al_lang_by_file("x.mjs") == al_lang_by_name("node"));
    CHECK(al_lang_by_file("job.sh") == al_lang_by_name("bash"));
    CHECK(al_lang_by_file("README") == NULL);
    CHECK(al_lang_by_file("x.rb") == NULL);
    CHECK(al_lang_by_name("python3") == al_lang_by_name("python"));
    CHECK(al_lang_by_name("cobol") == NULL);
    CHECK(strcmp(al_lang_by_name("node")->interpreter, "/usr/bin/node") == 0);
}

static void test_errors(void) {
    al_error e = { 0 };
    CHECK(al_err(&e, "mount", ENOENT, "first %d", 1) == -ENOENT);
    CHECK(al_err(&e, "outer", EPERM, "second") == -EPERM);
    /* the innermost failure is kept */
    CHECK(strcmp(e.step, "mount") == 0 && e.err == ENOENT && strcmp(e.msg, "first 1") == 0);
}

static void test_defaults(void) {
    al_box_limits l;
    al_box_limits_default(&l);
    CHECK(l.wall_ms == 60000);
    CHECK(l.memory_bytes == 512ULL << 20);
    CHECK(l.cpu_millis == 500);
    CHECK(l.pids == 256);
    CHECK(l.tmpfs_bytes == 64ULL << 20);
    CHECK(l.output_bytes == 1ULL << 20);
    CHECK(strcmp(al_reason_name(AL_REASON_OUTPUT_LIMIT), "output_limit") == 0);
    CHECK(strcmp(al_reason_name(_AL_REASON_MAX), "error") == 0);
}

static void test_builtin_filter_is_the_policy(void) {
    al_error e = { 0 };
    al_seccomp_prog fresh, built;
    CHECK(al_seccomp_compile(&fresh, &e) == 0);
    CHECK(al_seccomp_builtin(&built, &e) == 0);
    for (int i = 0; i < 2; i++) {
        CHECK(fresh.f[i].len > 0);
        CHECK(fresh.f[i].len == built.f[i].len);
        CHECK(memcmp(fresh.f[i].insns, built.f[i].insns, fresh.f[i].len * sizeof(struct sock_filter)) == 0);
    }
    al_seccomp_prog_free(&fresh);
    al_seccomp_prog_free(&built);
}

static char *red(al_dlp *d, const char *in, int *count) {
    size_t n;
    return al_dlp_redact(d, in, strlen(in), count, &n);
}

static void test_dlp(void) {
    al_error e = { 0 };
    al_dlp *d = NULL;
    json_t *extra = json_pack("[{s:s, s:s}]", "name", "emp", "pattern", "EMP-[0-9]{6}");
    CHECK(al_dlp_new(extra, &d, &e) == 0);
    json_decref(extra);
    int c = 0;
    char *o = red(d, "id AKIAABCDEFGHIJKLMNOP end\n", &c);
    CHECK(strcmp(o, "id [REDACTED:aws_access_key] end\n") == 0 && c == 1);
    free(o);
    c = 0;
    o = red(d, "Authorization: Bearer abc.DEF-123_xyz\nghp_0123456789abcdefghijAB sk-abcdefghijklmnopqrstuvwx\n", &c);
    CHECK(strstr(o, "abc.DEF") == NULL && strstr(o, "ghp_0123") == NULL && strstr(o, "sk-abcd") == NULL && c == 3);
    free(o);
    c = 0;
    o = red(d, "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEsecret\nmore\n-----END RSA PRIVATE KEY-----\nb\n", &c);
    CHECK(strcmp(o, "a\n[REDACTED:private_key]\nb\n") == 0 && c == 1);
    free(o);
    c = 0;
    o = red(d, "db https://bob:hunter2@example.com x EMP-123456\n", &c);
    CHECK(strstr(o, "hunter2") == NULL && strstr(o, "EMP-123456") == NULL && c == 2);
    free(o);
    /* split across chunks: held to the end of the line */
    al_dlp_stream st = { .dlp = d };
    size_t n = 0;
    char *a = al_dlp_stream_feed(&st, "token ghp_0123456789", 20, &n);
    CHECK(a == NULL);
    char *b = al_dlp_stream_feed(&st, "abcdefghij tail\nnext", 20, &n);
    CHECK(b && strcmp(b, "token [REDACTED:github_token] tail\n") == 0);
    char *f = al_dlp_stream_flush(&st, &n);
    CHECK(f && strcmp(f, "next") == 0);
    free(a);
    free(b);
    free(f);
    /* a megabyte on one line of pattern-ish characters finishes (segments) */
    size_t big = 1 << 20;
    char *x = malloc(big + 1);
    memset(x, 'x', big);
    x[big] = '\0';
    c = 0;
    size_t on = 0;
    o = al_dlp_redact(d, x, big, &c, &on);
    CHECK(o && on == big && c == 0);
    free(o);
    free(x);
    CHECK(al_dlp_check_pattern("([", &e) < 0);
    al_dlp_free(d);
}

/* Private or not, as the proxy will judge a CONNECT authority's host. */
static bool denied(const char *h) {
    al_host x;
    switch (al_host_parse(h, &x)) {
    case AL_HOST_IPV4:
        return al_addr4_private(x.v4) != NULL;
    case AL_HOST_IPV6:
        return al_addr6_private(&x.v6) != NULL;
    case AL_HOST_NAME:
        return al_name_is_local(x.name);
    default:
        return true;
    }
}

static void test_proxy_deny_set(void) {
    /* SECURITY.md I9: every spelling of private and metadata addresses */
    static const char *const bad[] = {
        "2852039166", "0xA9FEA9FE", "0xa9.0xfe.0xa9.0xfe", "0251.0376.0251.0376", "169.254.43518", "127.1", "0",
        "0.0.0.0", "[::]", "[::1]", "[::ffff:7f00:1]", "[::ffff:169.254.169.254]", "[::169.254.169.254]",
        "[64:ff9b::a9fe:a9fe]", "[2002:a9fe:a9fe::]", "[fe80::1]", "[fe80::1%eth0]", "localhost", "localhost.",
        "x.localhost", "LOCALHOST", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "100.64.0.1",
        "100.127.255.255", "127.0.0.1", "169.254.169.254", "192.0.0.1", "198.18.0.1", "198.19.255.255",
        "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255", "[fc00::1]", "[fd00:ec2::254]",
        "[ff02::1]", "[2001:db8::1]", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]", "[64:ff9b:1::1]",
        "100.100.100.200", "168.63.129.16", "[::ffff:10.0.0.1]", "[2002:0a00:0001::]", "[fec0::1]", "[100::1]",
        "1.2.3.4.5", "", "a..b", "-bad.example", "user@allowed.example@evil.net", "exa mple.com", "[::1",
    };
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        bool d = denied(bad[i]);
        if (!d)
            fprintf(stderr, "not denied: %s\n", bad[i]);
        CHECK(d);
    }
    static const char *const good[] = {
        "1.1.1.1", "8.8.8.8", "93.184.216.34", "[2606:4700:4700::1111]", "[::ffff:1.1.1.1]", "[64:ff9b::808:808]",
        "[2002:0808:0808::1]", "example.com", "Example.COM.", "xn--bcher-kva.example", "pypi.org", "172.32.0.1",
        "100.128.0.1", "11.0.0.1", "192.169.0.1",
    };
    for (size_t i = 0; i < ELEMENTSOF(good); i++) {
        bool d = denied(good[i]);
        if (d)
            fprintf(stderr, "denied: %s\n", good[i]);
        CHECK(!d);
    }
    /* names: normalised, matched whole */
    al_host h;
    CHECK(al_host_parse("ALLOWED.Example.", &h) == AL_HOST_NAME && strcmp(h.name, "allowed.example") == 0);
    const char *const list[] = { "allowed.example", "pypi.org" };
    CHECK(al_name_allowed("allowed.example", list, 2));
    CHECK(!al_name_allowed("evilallowed.example", list, 2));
    CHECK(!al_name_allowed("allowed.example.evil.net", list, 2));
    CHECK(!al_name_allowed("sub.allowed.example", list, 2));
    CHECK(al_host_parse("0xA9FEA9FE", &h) == AL_HOST_IPV4 && ntohl(h.v4.s_addr) == 0xA9FEA9FEu);
}

int main(void) {
    test_sizes();
    test_millis();
    test_cgroup_keys();
    test_lang();
    test_errors();
    test_defaults();
    test_builtin_filter_is_the_policy();
    test_dlp();
    test_proxy_deny_set();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
