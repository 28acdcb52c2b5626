/* The kubeconfig's reader (kube/cluster.c): a path too long for its
 * buffer is refused, never cut into the name of another file. No cluster. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kube/cluster.h"

static const char head[] = "current-context: c\n"
                           "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                           "users: [{name: u, user: {token: abc}}]\n"
                           "clusters: [{name: k, cluster: {server: \"https://10.0.0.1:6443\", certificate-authority: \"";

static void long_path_is_refused(void) {
    size_t n = 9000;
    char *text = malloc(sizeof head + n + 16);
    strcpy(text, head);
    /* a name whose first 8 KiB would be a real directory's path */
    char *p = text + strlen(text);
    for (size_t i = 0; i < n; i += 2)
        memcpy(p + i, "./", 2);
    strcpy(p + n, "x\"}}]\n");
    al_kube_cluster c;
    al_error err = { 0 };
    int r = al_kube_cluster_parse(text, strlen(text), "/etc", true, NULL, &c, &err);
    CHECK(r == -ENAMETOOLONG && strstr(err.msg, "certificate-authority"));
    free(text);
}

static void long_directory_is_refused(void) {
    char dir[5000];
    memset(dir, 'd', sizeof dir - 1);
    dir[0] = '/';
    dir[sizeof dir - 1] = '\0';
    al_kube_cluster c;
    al_error err = { 0 };
    int r = al_kube_cluster_parse("a: b\n", 5, dir, true, NULL, &c, &err);
    CHECK(r == -ENAMETOOLONG);
}

int main(void) {
    long_path_is_refused();
    long_directory_is_refused();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
