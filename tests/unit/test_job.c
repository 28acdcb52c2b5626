/* Unit tests for the job's codec (src/drivers/job_codec.c): every field
 * of a job crosses the wire and comes back the same; what the helper reads
 * is strict (no unknown field, each of its type, within its cap); a job at
 * AL_JOB_MAX is refused with the API's reason. */
#include <stdlib.h>
#include <string.h>

#include "drivers/job.h"
#include "drivers/pkg_spec.h"

#include "check.h"

static bool decodes(const char *text) {
    al_job j;
    al_error err = { 0 };
    int r = al_job_decode(text, strlen(text), &j, &err);
    al_job_free(&j);
    return r == 0;
}

int main(void) {
    al_job j;
    al_job_init(&j);
    CHECK(j.fork_fd == -1 && j.zygote_fd == -1 && j.driver == AL_JOB_NATIVE && j.limits.wall_ms > 0);
    j.lang = al_lang_by_name("python");
    CHECK(al_job_set(&j.code, "print('é\\n')\n") == 0 && al_job_set(&j.out_dir, "/o") == 0);
    CHECK(al_job_add_input(&j, "/in/a") == 0 && al_job_add_input(&j, "/in/b") == 0);
    CHECK(al_job_add_arg(&j, "") == 0 && al_job_add_arg(&j, "x y") == 0);
    CHECK(al_job_set(&j.image_dir, "/i") == 0 && al_job_set(&j.image_digest, "ab") == 0);
    CHECK(al_job_set(&j.stdin_path, "/s") == 0 && al_job_set(&j.network, "allow:pypi.org") == 0);
    CHECK(al_job_set(&j.preload, "numpy") == 0 && al_job_set(&j.docker_socket, "/d.sock") == 0);
    CHECK(al_job_set(&j.work_in, "/sb/home") == 0 && al_job_set(&j.work_out, "/r/work") == 0);
    j.limits.wall_ms = 7000;
    j.limits.memory_bytes = 1 << 28;
    j.limits.tmpfs_bytes = 12345;
    j.warm = true;
    j.fork_fd = 3;
    j.driver = AL_JOB_DOCKER;
    j.docker_box = (al_job_held){ .set = true, .id = "c", .image_id = "sha256:1", .hold_until_s = 99,
                                  .uids = { true, 100, 101, { 3, 4 } } };
    j.docker_uids = (al_job_uids){ true, 5, 6, { 4, 3 } };

    char *text = NULL;
    size_t len = 0;
    al_error err = { 0 };
    CHECK(al_job_encode(&j, &text, &len, &err) == 0 && text && strlen(text) == len && !memchr(text, '\n', len));
    al_job d;
    CHECK(al_job_decode(text, len, &d, &err) == 0);
    CHECK(d.lang == j.lang && strcmp(d.code, j.code) == 0 && strcmp(d.out_dir, "/o") == 0);
    CHECK(d.n_inputs == 2 && strcmp(d.inputs[1], "/in/b") == 0);
    CHECK(d.has_args && d.n_args == 2 && strcmp(d.args[0], "") == 0 && strcmp(d.args[1], "x y") == 0);
    CHECK(strcmp(d.image_digest, "ab") == 0 && strcmp(d.stdin_path, "/s") == 0 && strcmp(d.network, "allow:pypi.org") == 0);
    CHECK(memcmp(&d.limits, &j.limits, sizeof d.limits) == 0);
    CHECK(d.warm && !d.zygote && d.fork_fd == 3 && d.zygote_fd == -1 && strcmp(d.preload, "numpy") == 0);
    CHECK(d.driver == AL_JOB_DOCKER && strcmp(d.docker_socket, "/d.sock") == 0 && !d.docker_runtime);
    CHECK(strcmp(d.work_in, "/sb/home") == 0 && strcmp(d.work_out, "/r/work") == 0);
    CHECK(d.docker_box.set && strcmp(d.docker_box.image_id, "sha256:1") == 0 && d.docker_box.hold_until_s == 99 &&
          d.docker_box.uids.uid == 101 && d.docker_box.uids.lock_fds[1] == 4);
    CHECK(d.docker_uids.set && d.docker_uids.holder == 5 && d.docker_uids.lock_fds[0] == 4 && !d.docker_keep.set);
    /* a copy is the same job */
    al_job c;
    char *text2 = NULL;
    size_t len2 = 0;
    CHECK(al_job_copy(&d, &c) == 0 && al_job_encode(&c, &text2, &len2, &err) == 0 && len2 == len &&
          memcmp(text, text2, len) == 0);
    free(text);
    free(text2);
    al_job_free(&c);
    al_job_free(&d);
    al_job_free(&j);
    CHECK(j.code == NULL && j.n_inputs == 0 && j.fork_fd == -1);

    /* a wall clock under a second crosses to the helper as it is (in
     * seconds it was 0) */
    {
        al_job ms;
        al_job_init(&ms);
        ms.lang = al_lang_by_name("bash");
        ms.limits.wall_ms = 500;
        char *t = NULL;
        size_t tl = 0;
        al_job back;
        CHECK(al_job_encode(&ms, &t, &tl, &err) == 0 && al_job_decode(t, tl, &back, &err) == 0);
        CHECK(back.limits.wall_ms == 500);
        free(t);
        al_job_free(&back);
        al_job_free(&ms);
        CHECK(al_job_decode("{\"limits\":{\"timeout_s\":3}}", 26, &back, &err) == 0 && back.limits.wall_ms == 3000);
        al_job_free(&back);
    }
    /* a remote job: its service, key, template and tag cross, and copy */
    al_job_init(&j);
    j.lang = al_lang_by_name("python");
    j.driver = AL_JOB_E2B;
    CHECK(al_job_set(&j.code, "pass") == 0 && al_job_set(&j.remote_api_url, "https://api.e2b.app") == 0 &&
          al_job_set(&j.remote_key, "e2b_k") == 0 && al_job_set(&j.remote_tag, "h:1/i/run_1") == 0 &&
          al_job_set(&j.remote_template, "base") == 0);
    CHECK(al_job_encode(&j, &text, &len, &err) == 0 && al_job_decode(text, len, &d, &err) == 0);
    CHECK(d.driver == AL_JOB_E2B && strcmp(d.remote_key, "e2b_k") == 0 && strcmp(d.remote_tag, "h:1/i/run_1") == 0 &&
          strcmp(d.remote_template, "base") == 0 && !d.remote_sandbox_url);
    CHECK(al_job_copy(&d, &c) == 0 && strcmp(c.remote_api_url, "https://api.e2b.app") == 0);
    free(text);
    al_job_free(&c);
    al_job_free(&d);
    al_job_free(&j);
    CHECK(decodes("{\"language\":\"python\",\"driver\":\"daytona\"}"));

    /* packages (issue 38): every field crosses, and copies; none: no member */
    al_job_init(&j);
    j.lang = al_lang_by_name("python");
    CHECK(al_job_set(&j.code, "import tinypkg") == 0 && al_job_add_pkg_python(&j, "tinypkg==1.0") == 0 &&
          al_job_add_pkg_node(&j, "@scope/x@^1.2 <2") == 0 && al_job_add_pkg_node(&j, "left-pad") == 0);
    CHECK(al_job_set(&j.pkg_layers_dir, "/s/layers") == 0 && al_job_set(&j.pkg_installer_dir, "/s/images/sha256-cd") == 0 &&
          al_job_set(&j.pkg_index_python, "http://pypi.test/simple") == 0 &&
          al_job_set(&j.pkg_registry_node, "https://registry.npmjs.org/") == 0 &&
          al_job_set(&j.pkg_network, "packages") == 0);
    j.pkg_scripts = true;
    j.pkg_limits.wall_ms = 300000;
    j.pkg_limits.memory_bytes = 1ULL << 30;
    j.pkg_layer_max_bytes = 512ULL << 20;
    j.pkg_layer_max_files = 50000;
    CHECK(al_job_has_packages(&j));
    CHECK(al_job_encode(&j, &text, &len, &err) == 0 && al_job_decode(text, len, &d, &err) == 0);
    CHECK(d.n_pkg_python == 1 && strcmp(d.pkg_python[0], "tinypkg==1.0") == 0 && d.n_pkg_node == 2 &&
          strcmp(d.pkg_node[0], "@scope/x@^1.2 <2") == 0);
    CHECK(strcmp(d.pkg_layers_dir, "/s/layers") == 0 && strcmp(d.pkg_installer_dir, "/s/images/sha256-cd") == 0 &&
          strcmp(d.pkg_index_python, "http://pypi.test/simple") == 0 && strcmp(d.pkg_network, "packages") == 0 &&
          strcmp(d.pkg_registry_node, "https://registry.npmjs.org/") == 0);
    CHECK(d.pkg_scripts && memcmp(&d.pkg_limits, &j.pkg_limits, sizeof d.pkg_limits) == 0 &&
          d.pkg_layer_max_bytes == 512ULL << 20 && d.pkg_layer_max_files == 50000);
    CHECK(al_job_copy(&d, &c) == 0 && al_job_encode(&c, &text2, &len2, &err) == 0 && len2 == len &&
          memcmp(text, text2, len) == 0);
    free(text);
    free(text2);
    al_job_free(&c);
    al_job_free(&d);
    al_job_free(&j);
    CHECK(j.n_pkg_python == 0 && !j.pkg_layers_dir && !al_job_has_packages(&j));
    CHECK(al_job_encode(&j, &text, &len, &err) == 0 && !strstr(text, "packages"));
    free(text);
    CHECK(decodes("{\"packages\":{\"python\":[\"a\"]}}"));
    CHECK(!decodes("{\"packages\":{}}") && !decodes("{\"packages\":{\"python\":[]}}"));
    CHECK(!decodes("{\"packages\":{\"python\":[\"a\"],\"extra\":1}}"));
    CHECK(!decodes("{\"packages\":{\"python\":[\"\"]}}") && !decodes("{\"packages\":{\"node\":[1]}}"));
    CHECK(!decodes("{\"packages\":{\"python\":[\"a\"],\"scripts\":\"yes\"}}"));
    {
        al_job many_pkgs;
        al_job_init(&many_pkgs);
        int rp = 0;
        for (int i = 0; i <= AL_JOB_PKG_MAX && rp == 0; i++)
            rp = al_job_add_pkg_node(&many_pkgs, "a");
        CHECK(rp == -E2BIG && many_pkgs.n_pkg_node == AL_JOB_PKG_MAX);
        al_job_free(&many_pkgs);
    }
    /* specs: a name and a version constraint, nothing else */
    static const char *const py_ok[] = { "requests", "tinypkg==1.0", "a.b_c-d", "pkg[extra,two]>=2.0", "x~=1.4.*",
                                         "x!=1", "x<2", "x>1.0rc1", "Django==4.2+local" };
    static const char *const py_bad[] = { "", "-e", "--index-url=http://x", "git+https://x/y", "./local", "/abs",
                                          "http://x/y.whl", "x==", "x[]", "x @ https://x", "x;python_version<'3'",
                                          "x==1 ", "_x", "x=1", "x==1,<2",
                                          /* what pip reads as a file of its directory */
                                          "tinypkg-1.0-py3-none-any.whl", "x==1.tar.gz", "x.ZIP[e]", "x==1.tgz" };
    static const char *const node_ok[] = { "left-pad", "left-pad@1.3.0", "@scope/pkg", "@scope/pkg@^1.2",
                                           "x@>=1 <2", "x@1.x || 2", "x@latest", "x@~1.2.3" };
    static const char *const node_bad[] = { "", "-g", "Left-Pad", "x@", "@scope", "@scope/", "github:user/repo",
                                            "file:../x", "https://x/y.tgz", "x@git+ssh://x", "../x", "x/y", "x@1;rm",
                                            "@Scope/x",
                                            /* what npm-package-arg reads as a file or directory */
                                            "x.tgz", "x@.", "x@..", "@s/x@.1", "x@a.TGZ", "x@1.tar", "x@1.tar_gz" };
    for (size_t i = 0; i < ELEMENTSOF(py_ok); i++)
        CHECK(al_pkg_spec_check(AL_PKG_PYTHON, py_ok[i], &err) == 0);
    for (size_t i = 0; i < ELEMENTSOF(py_bad); i++)
        CHECK(al_pkg_spec_check(AL_PKG_PYTHON, py_bad[i], &err) == -EINVAL && strcmp(err.step, "packages") == 0);
    for (size_t i = 0; i < ELEMENTSOF(node_ok); i++)
        CHECK(al_pkg_spec_check(AL_PKG_NODE, node_ok[i], &err) == 0);
    for (size_t i = 0; i < ELEMENTSOF(node_bad); i++)
        CHECK(al_pkg_spec_check(AL_PKG_NODE, node_bad[i], &err) == -EINVAL);
    {
        char longname[AL_JOB_PKG_SPEC_MAX + 2];
        memset(longname, 'a', sizeof longname - 1);
        longname[sizeof longname - 1] = '\0';
        CHECK(al_pkg_spec_check(AL_PKG_NODE, longname, &err) == -EINVAL);
        longname[AL_JOB_PKG_SPEC_MAX] = '\0';
        CHECK(al_pkg_spec_check(AL_PKG_NODE, longname, &err) == 0);
    }
    char nm[64];
    al_pkg_spec_name(AL_PKG_PYTHON, "pkg[extra]>=2", nm, sizeof nm);
    CHECK(strcmp(nm, "pkg") == 0);
    al_pkg_spec_name(AL_PKG_NODE, "@scope/pkg@^1", nm, sizeof nm);
    CHECK(strcmp(nm, "@scope/pkg") == 0);
    al_pkg_spec_name(AL_PKG_NODE, "left-pad", nm, sizeof nm);
    CHECK(strcmp(nm, "left-pad") == 0);
    al_pkg_lang pl;
    CHECK(al_pkg_lang_from_name("node", &pl) == 0 && pl == AL_PKG_NODE && al_pkg_lang_from_name("ruby", &pl) < 0);

    /* what the tests and older drivers write: limits in part, the rest defaults */
    CHECK(decodes("{\"language\":\"python\",\"code\":\"pass\",\"out_dir\":\"/o\",\"fork_fd\":3,\"limits\":{\"timeout_s\":10}}"));
    CHECK(decodes("{\"language\":\"python\",\"driver\":\"native\"}"));
    /* strict */
    CHECK(!decodes("{\"language\":\"python\",\"extra\":1}"));
    CHECK(!decodes("{\"language\":\"cobol\"}"));
    CHECK(!decodes("{\"language\":\"python\",\"driver\":\"kubernetes\"}"));
    CHECK(!decodes("{\"args\":[1]}"));
    CHECK(!decodes("{\"inputs\":\"/a\"}"));
    CHECK(!decodes("{\"limits\":{\"timeout_s\":-1}}"));
    CHECK(!decodes("{\"limits\":{\"timeout_s\":9223372036854776}}"));
    CHECK(!decodes("{\"limits\":{\"wall_ms\":1}}"));
    CHECK(!decodes("{\"limits\":{\"timeout_s\":1,\"timeout_ms\":500}}"));
    CHECK(!decodes("{\"fork_fd\":-2}"));
    CHECK(!decodes("{\"warm\":1}"));
    CHECK(!decodes("{\"docker_uids\":{\"holder\":1,\"uid\":2}}"));
    CHECK(!decodes("{\"docker_keep\":{\"id\":\"x\",\"holder\":1,\"uid\":2,\"lock_fds\":[3,4],\"image_id\":\"y\"}}"));
    CHECK(!decodes("{\"code\":\"a\",\"code\":\"b\"}"));
    CHECK(!decodes("[]") && !decodes("") && !decodes("{"));
    /* a working directory that would flow in and not back, or back and not in */
    CHECK(!decodes("{\"work_in\":\"/a\"}") && !decodes("{\"work_out\":\"/a\"}"));
    CHECK(decodes("{\"work_in\":\"/a\",\"work_out\":\"/b\"}"));
    /* the cap on arguments */
    al_job many;
    al_job_init(&many);
    int r = 0;
    for (int i = 0; i <= AL_JOB_ARGS_MAX && r == 0; i++)
        r = al_job_add_arg(&many, "a");
    CHECK(r == -E2BIG && many.n_args == AL_JOB_ARGS_MAX);
    al_job_free(&many);

    /* a job too large for its helper: refused, with the size said */
    al_job big;
    al_job_init(&big);
    big.lang = al_lang_by_name("bash");
    big.code = malloc(AL_JOB_MAX);
    memset(big.code, 'x', AL_JOB_MAX - 1);
    big.code[AL_JOB_MAX - 1] = '\0';
    memset(&err, 0, sizeof err);
    text = NULL;
    CHECK(al_job_encode(&big, &text, &len, &err) == -E2BIG && !text && strcmp(err.step, "provisioning") == 0 &&
          strstr(err.msg, "more than its helper takes"));
    al_job_free(&big);

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
