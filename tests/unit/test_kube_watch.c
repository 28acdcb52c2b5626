/* A pod's state as the driver reads it from the API server (kube/watch.c,
 * al_kube_pod_classify and the watch's lines): hostile answers that must
 * not become a success or change the next watch's query. No cluster. */
#include <jansson.h>
#include <string.h>

#include "check.h"
#include "kube/kube_int.h"

static void classify(const char *text, al_kube_pod_state *st) {
    json_t *pod = json_loads(text, 0, NULL);
    CHECK(pod != NULL);
    al_kube_pod_classify(pod, st);
    json_decref(pod);
}

static void exit_code_must_be_an_integer(void) {
    al_kube_pod_state st = { 0 };
    classify("{\"status\":{\"containerStatuses\":[{\"name\":\"main\",\"state\":{\"terminated\":"
             "{\"exitCode\":\"3\",\"reason\":\"Error\"}}}]}}", &st);
    CHECK(st.phase == AL_KPOD_FAILED && strstr(st.why, "exitCode"));
    classify("{\"status\":{\"containerStatuses\":[{\"name\":\"main\",\"state\":{\"terminated\":"
             "{\"reason\":\"Completed\"}}}]}}", &st);
    CHECK(st.phase == AL_KPOD_FAILED);
    classify("{\"status\":{\"containerStatuses\":[{\"name\":\"main\",\"state\":{\"terminated\":"
             "{\"exitCode\":3,\"reason\":\"Error\"}}}]}}", &st);
    CHECK(st.phase == AL_KPOD_DONE && st.exit_code == 3);
}

static void resource_version_goes_into_a_query_unchanged(void) {
    al_kube_pod_state st = { 0 };
    classify("{\"metadata\":{\"resourceVersion\":\"1234\"}}", &st);
    CHECK(strcmp(st.rv, "1234") == 0);
    /* one that would add a parameter to the watch is not kept: the last
     * good one stays */
    classify("{\"metadata\":{\"resourceVersion\":\"5&fieldSelector=\"}}", &st);
    CHECK(strcmp(st.rv, "1234") == 0);
    classify("{\"metadata\":{\"resourceVersion\":\"5 6\"}}", &st);
    CHECK(strcmp(st.rv, "1234") == 0);
    /* and a bookmark's the same */
    al_kube_watch w = { 0 };
    w.st = st;
    const char *bm = "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"99\"}}}\n"
                     "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"9#x\"}}}\n";
    CHECK(al_kube_watch_feed(&w, bm, strlen(bm)) == 0);
    CHECK(strcmp(w.st.rv, "99") == 0);
    al_kube_watch_free(&w);
}

int main(void) {
    exit_code_must_be_an_integer();
    resource_version_goes_into_a_query_unchanged();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
