/* Unit tests for the pure logic of libairlock-box. Prints a TAP-like line
 * per check and a "N passed, N failed" summary. */
#include <arpa/inet.h>
#include <string.h>

#include "box/box.h"
#include "box/cgroup.h"
#include "box/seccomp.h"
#include "lang/lang.h"
#include "proxy/addr.h"
#include "proxy/policy.h"
#include "proxy/request.h"
#include "proxy/sni.h"
#include "core/dlp.h"
#include "util/util.h"

#include "check.h"

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

static void test_utf8(void) {
    /* jansson's rules: valid sequences, and what it refuses */
    CHECK(al_utf8_seq((const unsigned char *)"a", 1) == 1);
    CHECK(al_utf8_seq((const unsigned char *)"\xc3\xa9", 2) == 2);
    CHECK(al_utf8_seq((const unsigned char *)"\xe2\x82\xac", 3) == 3);
    CHECK(al_utf8_seq((const unsigned char *)"\xf0\x9f\x98\x80", 4) == 4);
    CHECK(al_utf8_seq((const unsigned char *)"\xc3", 1) == 0);          /* cut */
    CHECK(al_utf8_seq((const unsigned char *)"\xc0\xaf", 2) == 0);      /* overlong */
    CHECK(al_utf8_seq((const unsigned char *)"\xed\xa0\x80", 3) == 0); /* surrogate */
    CHECK(al_utf8_seq((const unsigned char *)"\xf4\x90\x80\x80", 4) == 0); /* past U+10FFFF */
    CHECK(al_utf8_seq((const unsigned char *)"\xa9", 1) == 0);
    /* a cut at MAX backs off to the character's start */
    const char *s = "ab\xc3\xa9z";
    CHECK(al_utf8_cut(s, 5, 10) == 5);
    CHECK(al_utf8_cut(s, 5, 4) == 4);
    CHECK(al_utf8_cut(s, 5, 3) == 2);
    CHECK(al_utf8_cut("\xf0\x9f\x98\x80", 4, 3) == 0);
    /* fix: a cut character at the end is dropped, other bad bytes become '?' */
    char a[] = "511\xc3";
    CHECK(strcmp(al_utf8_fix(a), "511") == 0);
    char b[] = "x\xffy\xe2\x82";
    CHECK(strcmp(al_utf8_fix(b), "x?y") == 0);
    char c[] = "\xe2\x82z\xc3\xa9";
    CHECK(strcmp(al_utf8_fix(c), "??z\xc3\xa9") == 0);
    char d[] = "ok \xf0\x9f\x98\x80";
    CHECK(strcmp(al_utf8_fix(d), "ok \xf0\x9f\x98\x80") == 0);
    /* scrub keeps the length (and NULs) */
    char e[] = { 'a', '\0', (char)0xc3, 'b', (char)0xa9 };
    CHECK(al_utf8_scrub(e, sizeof e) == 5 && e[1] == '\0' && e[2] == '?' && e[3] == 'b' && e[4] == '?');
    /* error messages are always valid UTF-8: a long name cut inside a character */
    al_error err = { 0 };
    char name[600];
    memset(name, 'n', sizeof name);
    memcpy(name + 508, "\xc3\xa9\xc3\xa9", 4);
    name[599] = '\0';
    al_err(&err, "x", EINVAL, "%.509s", name);
    CHECK(strlen(err.msg) == 508);
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
    CHECK(strcmp(al_reason_name(AL_REASON_INSTALL_FAILED), "install_failed") == 0);
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
    /* output is bytes: NULs do not end a line, nor hide what follows them */
    static const char nul[] = "\0AKIAABCDEFGHIJKLMNOP\0tail\xff\n";
    static const char nul_want[] = "\0[REDACTED:aws_access_key]\0tail\xff\n";
    c = 0;
    o = al_dlp_redact(d, nul, sizeof nul - 1, &c, &on);
    CHECK(o && on == sizeof nul_want - 1 && memcmp(o, nul_want, on) == 0 && c == 1);
    /* shown as text (U+FFFD for NUL and the byte that is not UTF-8) plus the exact bytes */
    json_t *obj = json_object();
    CHECK(al_output_set(obj, "stdout", o, on) == 0);
    CHECK(strcmp(json_string_value(json_object_get(obj, "stdout")),
                 "\xef\xbf\xbd[REDACTED:aws_access_key]\xef\xbf\xbdtail\xef\xbf\xbd\n") == 0);
    size_t gl = 0;
    char *g = al_output_get(obj, "stdout", &gl);
    CHECK(g && gl == on && memcmp(g, o, on) == 0);
    free(g);
    CHECK(al_output_set(obj, "stdout", "clean \xc3\xa9", 8) == 0 && !json_object_get(obj, "stdout_base64"));
    json_decref(obj);
    free(o);
    al_dlp_free(d);
    /* bounded cost: a compile bomb is refused, a match past its limit withholds the line */
    CHECK(al_dlp_check_pattern("(a{1,32767}){1,32767}", &e) < 0);
    extra = json_pack("[{s:s, s:s}]", "name", "evil", "pattern", "^(a+)+$");
    CHECK(al_dlp_new(extra, &d, &e) == 0);
    json_decref(extra);
    c = 0;
    o = red(d, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!\nok\n", &c);
    CHECK(o && strcmp(o, "[REDACTED:evil]\nok\n") == 0 && c == 1);
    free(o);
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
    /* the root label's dot does not make an address a name (found by fuzz-addr) */
    CHECK(al_host_parse("0xa9fea9fe.", &h) == AL_HOST_IPV4 && ntohl(h.v4.s_addr) == 0xA9FEA9FEu);
    CHECK(al_host_parse("0x4.", &h) == AL_HOST_IPV4 && ntohl(h.v4.s_addr) == 4);
    CHECK(al_host_parse("169.254.169.254.", &h) == AL_HOST_IPV4);
    CHECK(al_host_parse("127.1.", &h) == AL_HOST_IPV4);
    CHECK(al_host_parse("1.2.3.4..", &h) == AL_HOST_INVALID);
    al_net_policy *pol = malloc(sizeof *pol);
    al_error perr = { 0 };
    CHECK(pol && al_net_policy_parse("hosts:0xa9fea9fe.", pol, &perr) < 0 && strstr(perr.msg, "is an IP address"));
    free(pol);
}

static int parse(const char *head, al_proxy_req *r) {
    const char *why;
    return al_proxy_req_parse(head, strlen(head), r, &why);
}

static void test_proxy_request(void) {
    al_proxy_req r;
    CHECK(parse("CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\n\r\n", &r) == 0 && r.connect &&
          strcmp(r.host, "allowed.example") == 0 && r.port == 443);
    CHECK(parse("CONNECT [::1]:443 HTTP/1.1\r\n\r\n", &r) == 0 && strcmp(r.host, "[::1]") == 0);
    CHECK(parse("GET http://a.example/x?y=1 HTTP/1.1\r\nAccept: */*\r\n\r\n", &r) == 0 && !r.connect &&
          strcmp(r.host, "a.example") == 0 && r.port == 80 && r.path_len == 6);
    CHECK(parse("GET http://a.example:8080 HTTP/1.0\r\n\r\n", &r) == 0 && r.port == 8080 && r.path_len == 0);
    /* incomplete, then refused shapes */
    CHECK(parse("CONNECT a.example:443 HTTP/1.1\r\n", &r) == -EAGAIN);
    CHECK(parse("CONNECT a.example:443 HTTP/1.1\n\n", &r) == -EINVAL);           /* bare LF */
    CHECK(parse("CONNECT a.example HTTP/1.1\r\n\r\n", &r) == -EINVAL);         /* no port */
    CHECK(parse("CONNECT a.example:0 HTTP/1.1\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("CONNECT a.example:65536 HTTP/1.1\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("CONNECT a.example:443/x HTTP/1.1\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("CONNECT user@allowed.example@evil.net:443 HTTP/1.1\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("GET http://user@allowed.example@evil.net/ HTTP/1.1\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("GET http://allowed.example\\@evil.net/ HTTP/1.1\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("CONNECT  a.example:443 HTTP/1.1\r\n\r\n", &r) == -EINVAL);   /* two spaces */
    CHECK(parse("CONNECT a.example:443 HTTP/1.1 x\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("CONNECT a.example:443 HTTP/2.0\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("CONNECT a.example:443 HTTP/1.1\r\n folded\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("CONNECT a.example:443 HTTP/1.1\r\nX: a\x01b\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("CONNECT a.example:443 HTTP/1.1\r\nBad Name: x\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("POST http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("POST http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("GET https://a.example/ HTTP/1.1\r\n\r\n", &r) == -EPROTONOSUPPORT);
    CHECK(parse("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", &r) == -EPROTONOSUPPORT);
    CHECK(parse("GET ftp://a.example/ HTTP/1.1\r\n\r\n", &r) == -EPROTONOSUPPORT);
    const char nul[] = "CONNECT a.example:443 HTTP/1.1\r\nX: a\0b\r\n\r\n";
    const char *why;
    CHECK(al_proxy_req_parse(nul, sizeof nul - 1, &r, &why) == -EINVAL);
    CHECK(al_proxy_looks_like_request("CONNECT evil:443 HTTP/1.1\r\n", 27));
    CHECK(!al_proxy_looks_like_request("\x16\x03\x01", 3));
    CHECK(al_proxy_header_dropped("Proxy-Authorization: x", 22) && al_proxy_header_dropped("host: x", 7) &&
          !al_proxy_header_dropped("Hostile: x", 10) && !al_proxy_header_dropped("Accept: x", 9));
}

/* A minimal ClientHello in one record, with the given SNI (or none). */
static size_t client_hello(unsigned char *b, const char *sni) {
    unsigned char body[512];
    size_t n = 0;
    body[n++] = 3, body[n++] = 3;
    memset(body + n, 0xab, 32), n += 32;
    body[n++] = 0;                                /* session id */
    body[n++] = 0, body[n++] = 2, body[n++] = 0x13, body[n++] = 0x01;
    body[n++] = 1, body[n++] = 0;                 /* compression: null */
    size_t ext_at = n;
    n += 2;
    if (sni) {
        size_t l = strlen(sni);
        body[n++] = 0, body[n++] = 0;             /* server_name */
        body[n++] = 0, body[n++] = (unsigned char)(l + 5);
        body[n++] = 0, body[n++] = (unsigned char)(l + 3);
        body[n++] = 0, body[n++] = 0, body[n++] = (unsigned char)l;
        memcpy(body + n, sni, l), n += l;
    }
    body[ext_at] = (unsigned char)((n - ext_at - 2) >> 8), body[ext_at + 1] = (unsigned char)(n - ext_at - 2);
    size_t o = 0;
    b[o++] = 22, b[o++] = 3, b[o++] = 1, b[o++] = (unsigned char)((n + 4) >> 8), b[o++] = (unsigned char)(n + 4);
    b[o++] = 1, b[o++] = 0, b[o++] = (unsigned char)(n >> 8), b[o++] = (unsigned char)n;
    memcpy(b + o, body, n);
    return o + n;
}

static void test_tls_sni(void) {
    unsigned char b[600];
    char name[256];
    size_t n = client_hello(b, "Allowed.Example");
    CHECK(al_tls_sni(b, n, name, sizeof name) == 1 && strcmp(name, "allowed.example") == 0);
    CHECK(al_tls_sni(b, n - 1, name, sizeof name) == -EAGAIN);
    CHECK(al_tls_sni(b, 3, name, sizeof name) == -EAGAIN);
    n = client_hello(b, NULL);
    CHECK(al_tls_sni(b, n, name, sizeof name) == 0);
    n = client_hello(b, "evil\x01.example");
    CHECK(al_tls_sni(b, n, name, sizeof name) == -EINVAL && name[0] == '\0');
    CHECK(al_tls_sni((const unsigned char *)"GET / HTTP/1.1\r\n", 16, name, sizeof name) == -EPROTO);
    /* a name by structure, not only by its characters (found by fuzz-sni) */
    const char *const not_names[] = { "169.254.169.254", "0x7f.1", "a..example", ".a.example", "a.example.", "-a.example" };
    for (size_t i = 0; i < ELEMENTSOF(not_names); i++) {
        n = client_hello(b, not_names[i]);
        CHECK(al_tls_sni(b, n, name, sizeof name) == -EINVAL && strcmp(name, not_names[i]) == 0);
    }
    n = client_hello(b, "a.example");
    b[9 + 2 + 32 + 1 + 4 + 2 + 2 + 2 + 4] ^= 0xff; /* corrupt the SNI list length */
    CHECK(al_tls_sni(b, n, name, sizeof name) == -EPROTO);
}

static void test_net_policy(void) {
    al_net_policy p;
    al_error err = { 0 };
    al_host h;
    char why[384];
    CHECK(al_net_policy_parse("offline", &p, &err) == 0 && p.mode == AL_NET_OFFLINE);
    CHECK(al_net_policy_parse(NULL, &p, &err) == 0 && p.mode == AL_NET_OFFLINE);
    CHECK(al_net_policy_parse("hosts:*.example", &p, &err) == -EINVAL);
    CHECK(al_net_policy_parse("hosts:10.0.0.1", &p, &err) == -EINVAL);
    CHECK(al_net_policy_parse("hosts:localhost", &p, &err) == -EINVAL);
    CHECK(al_net_policy_parse("hosts:", &p, &err) == -EINVAL);
    CHECK(al_net_policy_parse("hosts:a..b", &p, &err) == -EINVAL);
    CHECK(al_net_policy_parse("wifi", &p, &err) == -EINVAL);
    CHECK(al_net_policy_parse("hosts:Allowed.Example.,b.example", &p, &err) == 0 && p.mode == AL_NET_HOSTS &&
          p.n_hosts == 2 && strcmp(p.hosts[0], "allowed.example") == 0 && p.sni_check && !p.with_packages);
    char spec[256];
    al_net_policy_format(&p, spec, sizeof spec);
    CHECK(strcmp(spec, "hosts:allowed.example,b.example") == 0);
    /* label boundaries, case, trailing dot, ports, literals */
    al_host_parse("ALLOWED.EXAMPLE.", &h);
    CHECK(al_net_decide(&p, &h, 443, why, sizeof why));
    CHECK(al_net_decide(&p, &h, 80, why, sizeof why));
    CHECK(!al_net_decide(&p, &h, 22, why, sizeof why) && strstr(why, "port 22"));
    const char *bad[] = { "evil.example", "evilallowed.example", "allowed.example.evil.net", "xn--allwed-hva.example",
                          "sub.allowed.example", "localhost", "x.localhost" };
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        al_host_parse(bad[i], &h);
        CHECK(!al_net_decide(&p, &h, 443, why, sizeof why));
    }
    al_host_parse("93.184.216.34", &h);
    CHECK(!al_net_decide(&p, &h, 443, why, sizeof why) && strstr(why, "IP addresses are refused"));
    CHECK(al_net_policy_parse("hosts+packages:a.example", &p, &err) == 0 && p.with_packages);
    al_host_parse("pypi.org", &h);
    CHECK(al_net_decide(&p, &h, 443, why, sizeof why));
    CHECK(al_net_policy_parse("packages", &p, &err) == 0);
    CHECK(al_net_decide(&p, &h, 443, why, sizeof why));
    al_host_parse("a.example", &h);
    CHECK(!al_net_decide(&p, &h, 443, why, sizeof why) && strstr(why, "not a package registry"));
    /* internet: names pass to resolution, private literals never */
    CHECK(al_net_policy_parse("internet", &p, &err) == 0 && !p.sni_check);
    CHECK(al_net_decide(&p, &h, 443, why, sizeof why));
    al_host_parse("0xA9FEA9FE", &h);
    CHECK(!al_net_decide(&p, &h, 80, why, sizeof why) && strstr(why, "not public"));
    al_host_parse("[::ffff:169.254.169.254]", &h);
    CHECK(!al_net_decide(&p, &h, 80, why, sizeof why));
    al_host_parse("1.1.1.1", &h);
    CHECK(al_net_decide(&p, &h, 443, why, sizeof why));
    /* the test range is private in every build unless the test hook is set */
    struct sockaddr_in sin = { .sin_family = AF_INET };
    inet_pton(AF_INET, "198.18.0.3", &sin.sin_addr);
    CHECK(al_net_addr_denied(&p, (struct sockaddr *)&sin) != NULL);
    CHECK(al_net_policy_parse("offline", &p, &err) == 0);
    CHECK(!al_net_decide(&p, &h, 443, why, sizeof why) && strstr(why, "offline"));

    /* this host's own public address, in every form that reaches it */
    CHECK(al_net_policy_parse("internet", &p, &err) == 0);
    struct sockaddr_in mine = { .sin_family = AF_INET };
    inet_pton(AF_INET, "8.8.4.4", &mine.sin_addr);
    CHECK(al_net_addr_denied(&p, (struct sockaddr *)&mine) == NULL);
    al_net_policy_add_local(&p, (struct sockaddr *)&mine);
    CHECK(al_net_addr_denied(&p, (struct sockaddr *)&mine) != NULL);
    const char *forms[] = { "::ffff:8.8.4.4", "::8.8.4.4", "64:ff9b::808:404", "2002:808:404::1", "::ffff:1.1.1.1" };
    for (size_t i = 0; i < ELEMENTSOF(forms); i++) {
        struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };
        inet_pton(AF_INET6, forms[i], &s6.sin6_addr);
        CHECK(al_net_addr_denied(&p, (struct sockaddr *)&s6) != NULL);
    }
    struct sockaddr_in6 pub6 = { .sin6_family = AF_INET6 };
    inet_pton(AF_INET6, "2606:4700:4700::1111", &pub6.sin6_addr);
    CHECK(al_net_addr_denied(&p, (struct sockaddr *)&pub6) == NULL);
}

/* package_registries (issue 38): HOST or HOST=CIDR+CIDR; a registry with
 * ranges reaches only into them, private ones included; one without is
 * held to the public rule; plain http only to a ranged one */
static void test_net_registries(void) {
    static al_net_policy p;
    al_error err = { 0 };
    al_host h;
    char why[384], spec[512];
    CHECK(al_net_policy_parse("packages:Registry.NPMjs.org=203.0.113.80/32, pypi.internal=10.1.2.0/24+fd00::/8,pypi.org",
                              &p, &err) == 0);
    CHECK(p.mode == AL_NET_PACKAGES && p.packages_listed && p.n_packages == 3 && p.n_ranges[0] == 1 &&
          p.n_ranges[1] == 2 && p.n_ranges[2] == 0);
    al_net_policy_format(&p, spec, sizeof spec);
    CHECK(strcmp(spec, "packages:registry.npmjs.org=203.0.113.80/32,pypi.internal=10.1.2.0/24+fd00::/8,pypi.org") == 0);
    al_host_parse("files.pythonhosted.org", &h);
    CHECK(!al_net_decide(&p, &h, 443, why, sizeof why)); /* the policy's own list, not the default */
    struct sockaddr_in in = { .sin_family = AF_INET };
    inet_pton(AF_INET, "203.0.113.80", &in.sin_addr);
    /* the reserved address: refused to an unranged name, allowed to the ranged one */
    CHECK(al_net_dest_denied(&p, "pypi.org", (struct sockaddr *)&in) != NULL);
    CHECK(al_net_dest_denied(&p, "registry.npmjs.org", (struct sockaddr *)&in) == NULL);
    CHECK(al_net_dest_denied(&p, NULL, (struct sockaddr *)&in) != NULL);
    inet_pton(AF_INET, "203.0.113.81", &in.sin_addr);
    CHECK(al_net_dest_denied(&p, "registry.npmjs.org", (struct sockaddr *)&in) != NULL);
    /* a ranged registry at a public address outside its range: refused too */
    inet_pton(AF_INET, "104.16.0.1", &in.sin_addr);
    CHECK(al_net_dest_denied(&p, "registry.npmjs.org", (struct sockaddr *)&in) != NULL);
    CHECK(al_net_dest_denied(&p, "pypi.org", (struct sockaddr *)&in) == NULL);
    inet_pton(AF_INET, "10.1.2.200", &in.sin_addr);
    CHECK(al_net_dest_denied(&p, "pypi.internal", (struct sockaddr *)&in) == NULL);
    inet_pton(AF_INET, "10.1.3.1", &in.sin_addr);
    CHECK(al_net_dest_denied(&p, "pypi.internal", (struct sockaddr *)&in) != NULL);
    struct sockaddr_in6 in6 = { .sin6_family = AF_INET6 };
    inet_pton(AF_INET6, "fd12::1", &in6.sin6_addr);
    CHECK(al_net_dest_denied(&p, "pypi.internal", (struct sockaddr *)&in6) == NULL);
    /* 10.1.2.5 written as IPv6 is not in the IPv4 range */
    inet_pton(AF_INET6, "::ffff:10.1.2.5", &in6.sin6_addr);
    CHECK(al_net_dest_denied(&p, "pypi.internal", (struct sockaddr *)&in6) != NULL);
    /* plain http: a ranged registry only */
    al_host_parse("pypi.internal", &h);
    CHECK(al_net_plain_http_ok(&p, &h, why, sizeof why));
    al_host_parse("pypi.org", &h);
    CHECK(!al_net_plain_http_ok(&p, &h, why, sizeof why) && strstr(why, "https"));
    /* hosts+packages: a name on the hosts list is a host's (public rule) */
    CHECK(al_net_policy_parse("hosts:allowed.example", &p, &err) == 0);
    CHECK(al_net_plain_http_ok(&p, &h, why, sizeof why));
    /* malformed lists */
    static const char *const bad[] = { "packages:", "packages:a.example=", "packages:a.example=10.0.0.0/33",
                                       "packages:a.example=10.0.0.0/8+", "packages:a.example=nope",
                                       "packages:10.0.0.1", "packages:a.example,a.example", "packages:localhost=127.0.0.1",
                                       "packages:a.example=1.1.1.1+1.1.1.2+1.1.1.3+1.1.1.4+1.1.1.5+1.1.1.6+1.1.1.7+1.1.1.8+1.1.1.9",
                                       "packages:*.example" };
    for (size_t i = 0; i < ELEMENTSOF(bad); i++)
        CHECK(al_net_policy_parse(bad[i], &p, &err) < 0 && err.msg[0]);
    /* host bits beyond the prefix are cleared */
    CHECK(al_net_policy_parse("packages:a.example=10.1.2.3/16", &p, &err) == 0);
    al_net_policy_format(&p, spec, sizeof spec);
    CHECK(strcmp(spec, "packages:a.example=10.1.0.0/16") == 0);
}

static void test_proxy_rewrite(void) {
    al_proxy_req r;
    char out[9000];
    const char *h1 = "GET http://a.example:8080/p?q HTTP/1.1\r\nHost: evil.example\r\nAccept: */*\r\n"
                     "Proxy-Authorization: x\r\nConnection: keep-alive\r\n\r\n";
    CHECK(parse(h1, &r) == 0);
    ssize_t n = al_proxy_req_rewrite(h1, &r, out, sizeof out);
    CHECK(n > 0 && (size_t)n < sizeof out);
    out[n > 0 ? n : 0] = '\0';
    CHECK(strcmp(out, "GET /p?q HTTP/1.1\r\nHost: a.example:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n") == 0);
    const char *h2 = "GET http://a.example?bare HTTP/1.0\r\n\r\n";
    CHECK(parse(h2, &r) == 0 && (n = al_proxy_req_rewrite(h2, &r, out, sizeof out)) > 0);
    out[n > 0 ? n : 0] = '\0';
    static const char want2[] = "GET /?bare HTTP/1.1\r\nHost: a.example\r\n";
    CHECK(strncmp(out, want2, sizeof want2 - 1) == 0);
    CHECK(al_proxy_req_rewrite(h2, &r, out, 10) == -ENOSPC);
    /* an authority with a zone, a control byte or a non-ASCII byte is refused */
    CHECK(parse("CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("CONNECT [2606:4700::1%\xff]:443 HTTP/1.1\r\n\r\n", &r) == -EINVAL);
    CHECK(parse("CONNECT \xc3\xa9.example:443 HTTP/1.1\r\n\r\n", &r) == -EINVAL);
}

int main(void) {
    test_sizes();
    test_millis();
    test_cgroup_keys();
    test_lang();
    test_errors();
    test_utf8();
    test_defaults();
    test_builtin_filter_is_the_policy();
    test_dlp();
    test_proxy_deny_set();
    test_proxy_request();
    test_tls_sni();
    test_net_policy();
    test_net_registries();
    test_proxy_rewrite();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
