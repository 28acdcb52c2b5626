/*
 * A kubeconfig (src/kube/cluster.c, al_kube_cluster_parse): YAML an
 * operator is given by a cluster's owner, read with libyaml. Any bytes
 * parse to a cluster or to a refusal with its reason (never a crash, never
 * a leak), and what parses keeps the reader's promises: an https:// server
 * (http:// only on loopback), verification skipped only for a loopback
 * server, a namespace that is a DNS-1123 label, a credential to use. The
 * target names no file to read: one named is refused.
 */
#include "fuzz.h"
#include "kube/cluster.h"

static struct {
    unsigned parsed, refused, plugins, insecure, certs;
} seen;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *in = fuzz_copy(data, size, 0);
    al_kube_cluster c;
    al_error err = { 0 };
    int r = al_kube_cluster_parse(in, size, "", false, NULL, &c, &err);
    free(in);
    if (r < 0) {
        FUZZ_CHECK(err.msg[0] && strcmp(err.step, "kubeconfig") == 0 && err.err == -r, "a refusal without its "
                   "reason (%d)", r);
        FUZZ_CHECK(!c.token && !c.ca_pem && !c.cert_pem && !c.key_pem, "a refusal that kept what it read");
        seen.refused++;
        seen.plugins += err.err == ENOTSUP;
        return 0;
    }
    seen.parsed++;
    bool https = strncmp(c.server, "https://", 8) == 0;
    FUZZ_CHECK(https || (strncmp(c.server, "http://", 7) == 0 && al_kube_loopback_url(c.server)),
               "a server that is neither https:// nor loopback: %s", c.server);
    FUZZ_CHECK(!c.insecure || al_kube_loopback_url(c.server), "unverified TLS to %s", c.server);
    FUZZ_CHECK(al_kube_valid_namespace(c.namespace_), "namespace %s", c.namespace_);
    FUZZ_CHECK(c.token || (c.cert_pem && c.key_pem), "no credential");
    FUZZ_CHECK(!c.token_file[0], "a token file named, which this reader does not open");
    for (const char *p = c.token; p && *p; p++)
        FUZZ_CHECK((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f, "a token a header cannot carry");
    seen.insecure += c.insecure;
    seen.certs += c.cert_pem != NULL;
    al_kube_cluster_free(&c);
    return 0;
}

int fuzz_replay_check(void) {
    printf("kubeconfig: %u parsed, %u refused; %u plugins refused, %u insecure (loopback), %u client certificates\n",
           seen.parsed, seen.refused, seen.plugins, seen.insecure, seen.certs);
    return seen.parsed && seen.refused && seen.plugins && seen.insecure && seen.certs ? 0 : 1;
}
