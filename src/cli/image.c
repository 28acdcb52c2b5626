/* `airlock image`: build, ls, verify, rm runtime images (src/image). */
#include <dirent.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "../box/collect.h"
#include "../util/hash.h"
#include "../image/image.h"
#ifdef AIRLOCK_SERVER
#include "../image/export.h"
#endif
#include "cli.h"

const char *cli_state_dir(void) {
    const char *s = getenv("AIRLOCK_STATE");
    return s && *s ? s : "/var/lib/airlock";
}

void cli_images_dir(char *buf, size_t len) {
    const char *i = getenv("AIRLOCK_IMAGES");
    if (i && *i)
        snprintf(buf, len, "%s", i);
    else
        al_image_dir(cli_state_dir(), buf, len);
}

static int usage_to(FILE *f) {
    fprintf(f, "usage: airlock image [--images DIR | --state DIR] COMMAND\n"
                    "  (images are in DIR, else STATE/images; default AIRLOCK_IMAGES, else\n"
                    "   AIRLOCK_STATE/images, else /var/lib/airlock/images)\n"
                    "  build [RECIPE] [--alias NAME]         build a bundled recipe: default (Debian 13) or bookworm\n"
                    "                                        (Debian 12); the alias is the recipe's name\n"
                    "  build --recipe DIR [--alias NAME]     build the recipe in DIR (alias default)\n"
                    "  ls [--json]                           images: digest, aliases, size, created, what they hold\n"
                    "  verify NAME|sha256:DIGEST             re-hash the tree against its manifest\n"
                    "  rm sha256:DIGEST                      remove an image (and its aliases)\n"
                    "  import TARBALL [--alias NAME]         a docker save or OCI layout tarball as an image\n"
                    "  export NAME|sha256:DIGEST --out PATH [--format oci|oci-archive] [--user UID] [--json]\n"
                    "                                        the image as an OCI image layout (a directory) or its\n"
                    "                                        tar archive, deterministic; prints the manifest digest\n"
                    "                                        and records it in the image's oci.json (the kubernetes\n"
                    "                                        driver pulls REGISTRY/airlock-box@that digest)\n");
    return f == stdout ? 0 : 125;
}

static int usage(void) { return usage_to(stderr); }

/* Where the bundled recipe NAME (default, bookworm) may be: AIRLOCK_RECIPES;
 * beside the binary in a build tree inside the source tree (build/airlock ->
 * image/NAME); an install's data directory relative to its prefix
 * (PREFIX/bin/airlock -> PREFIX/share/airlock/image/NAME); then /usr/share
 * and /usr/local/share. The first that holds a build.sh wins; LOOKED lists
 * every place tried. */
static void bundled_recipe(const char *name, char *buf, size_t len, char *looked, size_t looked_len) {
    looked[0] = '\0';
    const char *env = getenv("AIRLOCK_RECIPES");
    if (env && *env) {
        snprintf(buf, len, "%s/%s", env, name);
        snprintf(looked, looked_len, "%s (AIRLOCK_RECIPES)", buf);
        return;
    }
    char cand[6][PATH_MAX];
    size_t n = 0;
    char self[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k > 0) {
        self[k] = '\0';
        /* the binary's directory's parent: the source tree, or the prefix */
        const char *up = dirname(dirname(self));
        if (strcmp(up, "/") == 0)
            up = "";
        snprintf(cand[n++], PATH_MAX, "%s/image/%s", up, name);
        snprintf(cand[n++], PATH_MAX, "%s/share/airlock/image/%s", up, name);
    }
    snprintf(cand[n++], PATH_MAX, "/usr/share/airlock/image/%s", name);
    snprintf(cand[n++], PATH_MAX, "/usr/local/share/airlock/image/%s", name);
    for (size_t i = 0; i < n; i++) {
        char script[PATH_MAX + 16];
        snprintf(script, sizeof script, "%s/build.sh", cand[i]);
        size_t used = strlen(looked);
        snprintf(looked + used, looked_len - used, "%s%s", used ? ", " : "", cand[i]);
        if (access(script, R_OK) == 0) {
            snprintf(buf, len, "%s", cand[i]);
            return;
        }
    }
    snprintf(buf, len, "%s", cand[0]);
}

/* sha256 over the recipe's regular files (name and content, sorted by
 * name): a cached image of the same recipe can be recognised. */
static void recipe_hash(const char *recipe, char out[65]) {
    struct dirent **names = NULL;
    int n = scandir(recipe, &names, NULL, alphasort);
    struct sha256_ctx c;
    sha256_init(&c);
    for (int i = 0; i < n; i++) {
        char p[PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", recipe, names[i]->d_name);
        struct stat st;
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && al_read_small(AT_FDCWD, p, 16 << 20, &data, &len) == 0) {
            sha256_update(&c, strlen(names[i]->d_name) + 1, (const uint8_t *)names[i]->d_name);
            sha256_update(&c, len, (const uint8_t *)data);
        }
        free(names[i]);
    }
    free(names);
    al_sha256_finish_hex(&c, out);
}

/* What the tree says it holds (usr/share/airlock/manifest.json), read
 * beneath the tree with no link followed and at most 1 MiB: the tree is what
 * the recipe's packages made, not a place to follow paths from. */
static json_t *read_holds(const char *rootfs) {
    _cleanup_close_ int rfd = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0)
        return NULL;
    _cleanup_close_ int fd = al_openat_beneath(rfd, "usr/share/airlock/manifest.json", O_RDONLY | O_NONBLOCK, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20))
        return NULL;
    return json_loadfd(fd, 0, NULL);
}

#ifdef AIRLOCK_SERVER
/* `image export NAME --out PATH [--format oci|oci-archive] [--user UID] [--json]`
 * (--user: the image config's User; 65534, a box's, unless the image is
 * not a box: the server image's is 10001) */
static int export_cmd(const char *images, int argc, char **argv) {
    const char *name = NULL, *out = NULL, *fmt = "oci";
    bool as_json = false;
    uint32_t user = AL_EXPORT_BOX_USER;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--user") == 0 && i + 1 < argc) {
            char *end = NULL;
            errno = 0;
            unsigned long u = strtoul(argv[++i], &end, 10);
            if (errno || !end || *end || end == argv[i] || u == 0 || u > 0x7fffffffUL) {
                fprintf(stderr, "airlock image export: --user wants a uid from 1 to 2147483647, not \"%s\"\n", argv[i]);
                return 125;
            }
            user = (uint32_t)u;
        }
        else if (strcmp(argv[i], "--format") == 0 && i + 1 < argc)
            fmt = argv[++i];
        else if (strcmp(argv[i], "--json") == 0)
            as_json = true;
        else if (argv[i][0] != '-' && !name)
            name = argv[i];
        else {
            fprintf(stderr, "airlock image export: %s \"%s\"\n",
                    (strcmp(argv[i], "--out") == 0 || strcmp(argv[i], "--format") == 0 || strcmp(argv[i], "--user") == 0) ? "a value is missing after"
                                                                                           : "unknown argument",
                    argv[i]);
            return usage();
        }
    }
    if (!name || !out) {
        fprintf(stderr, "airlock image export: %s\n", !name ? "name the image (NAME or sha256:DIGEST)" : "--out PATH is required");
        return usage();
    }
    al_export_format f;
    if (strcmp(fmt, "oci") == 0)
        f = AL_EXPORT_OCI;
    else if (strcmp(fmt, "oci-archive") == 0)
        f = AL_EXPORT_OCI_ARCHIVE;
    else {
        fprintf(stderr, "airlock image export: --format is oci or oci-archive, not \"%s\"\n", fmt);
        return 125;
    }
    char dir[PATH_MAX], digest[65];
    al_error err = { 0 };
    if (al_image_resolve(images, name, dir, sizeof dir, digest, &err) < 0) {
        fprintf(stderr, "airlock image export: %s\n", err.msg);
        return 125;
    }
    uint64_t t0 = al_now_ms();
    al_export_result res;
    if (al_image_export(dir, out, f, user, &res, &err) < 0) {
        fprintf(stderr, "airlock image export: %s: nothing was written\n", err.msg);
        return 125;
    }
    double secs = (double)(al_now_ms() - t0) / 1000.0;
    if (as_json) {
        char image[80];
        snprintf(image, sizeof image, "sha256:%s", digest);
        json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:f}", "digest", res.manifest_digest, "config_digest",
                              res.config_digest, "diff_id", res.diff_id, "image", image, "path", out, "format", fmt,
                              "layer_bytes", (json_int_t)res.layer_bytes, "seconds", secs);
        char *s = json_dumps(j, JSON_INDENT(2));
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(j);
    } else {
        printf("%s\n", res.manifest_digest);
        fprintf(stderr, "image: sha256:%s exported to %s (%s, layer %.1f MB, %.1f s)\n", digest, out, fmt,
                (double)res.layer_bytes / 1e6, secs);
    }
    return 0;
}
#endif

static int build(const char *images, int argc, char **argv) {
    char recipe[PATH_MAX], looked[4 * PATH_MAX + 64] = "";
    const char *alias = NULL, *given = NULL, *named = NULL;
    /* strict: a typo must not start a build that takes minutes */
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--recipe") == 0 && i + 1 < argc)
            given = argv[++i];
        else if (strcmp(argv[i], "--alias") == 0 && i + 1 < argc)
            alias = argv[++i];
        else if (argv[i][0] != '-' && !named && !given && al_image_name_ok(argv[i]))
            named = argv[i];
        else {
            fprintf(stderr, "airlock image build: %s \"%s\"\n", (strcmp(argv[i], "--recipe") == 0 || strcmp(argv[i], "--alias") == 0) ? "a value is missing after" : "unknown argument", argv[i]);
            return usage();
        }
    }
    if (named && given) {
        fprintf(stderr, "airlock image build: a bundled recipe (%s) or --recipe DIR, not both\n", named);
        return usage();
    }
    /* a bundled recipe's image is named for it; a recipe of one's own, as
     * before there were two, makes the default */
    if (!alias)
        alias = named ? named : "default";
    if (given)
        snprintf(recipe, sizeof recipe, "%s", given);
    else
        bundled_recipe(named ? named : "default", recipe, sizeof recipe, looked, sizeof looked);
    char script[PATH_MAX + 16];
    snprintf(script, sizeof script, "%s/build.sh", recipe);
    if (access(script, R_OK) != 0) {
        if (given)
            fprintf(stderr, "airlock image build: no recipe at %s\n", script);
        else
            fprintf(stderr, "airlock image build: no %s recipe (a directory holding build.sh); looked in: %s. "
                            "Name one with --recipe DIR or AIRLOCK_RECIPES\n", named ? named : "default", looked);
        return 125;
    }
    al_error derr = { 0 };
    if (al_image_dir_make(images, &derr) < 0) {
        fprintf(stderr, "airlock image build: %s\n", derr.msg);
        return 125;
    }
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.build-XXXXXX", images);
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "airlock image build: %s: %s\n", tmp, strerror(errno));
        return 125;
    }
    char rootfs[PATH_MAX + 16];
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", tmp);
    fprintf(stderr, "image: building %s into %s\n", recipe, rootfs);
    pid_t pid = fork();
    if (pid == 0) {
        /* progress goes to stderr: stdout carries only the digest */
        dup2(STDERR_FILENO, STDOUT_FILENO);
        execl("/bin/sh", "sh", script, rootfs, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        /* no half image is left behind */
        al_rm_tree(AT_FDCWD, tmp);
        fprintf(stderr, "airlock image build: the recipe failed (%s %d): nothing was stored\n",
                WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        return 125;
    }
    /* a tree with nothing in it is a recipe that went wrong, not an image */
    DIR *rd = opendir(rootfs);
    struct dirent *rde;
    bool empty = true;
    while (rd && empty && (rde = readdir(rd)))
        empty = strcmp(rde->d_name, ".") == 0 || strcmp(rde->d_name, "..") == 0;
    if (rd)
        closedir(rd);
    if (!rd || empty) {
        al_rm_tree(AT_FDCWD, tmp);
        fprintf(stderr, "airlock image build: the recipe made %s: nothing was stored\n", rd ? "an empty tree (the image holds no files)" : "no tree");
        return 125;
    }
    json_t *holds = read_holds(rootfs);
    char rh[65];
    recipe_hash(recipe, rh);
    json_t *info = json_pack("{s:s, s:s, s:o}", "recipe", recipe, "recipe_sha256", rh, "holds", holds ? holds : json_object());
    al_error err = { 0 };
    char digest[65], before[65] = "", dir[PATH_MAX];
    al_error e2 = { 0 };
    al_image_resolve(images, alias, dir, sizeof dir, before, &e2);
    fprintf(stderr, "image: hashing the tree\n");
    int r = al_image_commit(images, rootfs, info, digest, &err);
    json_decref(info);
    rmdir(tmp);
    if (r < 0 || al_image_alias(images, alias, digest, &err) < 0) {
        al_rm_tree(AT_FDCWD, tmp);
        fprintf(stderr, "airlock image build: %s\n", err.msg);
        return 125;
    }
    printf("sha256:%s\n", digest);
    fprintf(stderr, "image: %s is sha256:%s (%s)\n", alias, digest,
            !before[0] ? "new" : strcmp(before, digest) == 0 ? "digest unchanged" : "digest changed");
    return 0;
}

int cli_image(int argc, char **argv) {
    if (cli_help_asked(argc, argv))
        return usage_to(stdout);
    char images[PATH_MAX];
    cli_images_dir(images, sizeof images);
    int i = 1;
    while (i + 1 < argc && (strcmp(argv[i], "--state") == 0 || strcmp(argv[i], "--images") == 0)) {
        if (strcmp(argv[i], "--state") == 0)
            al_image_dir(argv[i + 1], images, sizeof images);
        else
            snprintf(images, sizeof images, "%s", argv[i + 1]);
        i += 2;
    }
    if (i >= argc)
        return usage();
    /* `airlock image help` too: the usage, and nothing run (a build takes minutes) */
    if (strcmp(argv[i], "help") == 0)
        return usage_to(stdout);
    const char *cmd = argv[i];
    /* a misplaced --state would otherwise be ignored and another
     * directory's images listed, built or removed */
    for (int k = i + 1; k < argc; k++)
        if (strcmp(argv[k], "--state") == 0 || strcmp(argv[k], "--images") == 0) {
            fprintf(stderr, "airlock image: %s goes before the command (airlock image %s DIR %s ...)\n", argv[k],
                    argv[k], cmd);
            return 125;
        }
    /* each command's words, exactly: an unknown option is refused, not ignored */
    int n = argc - i;
    bool shape_ok = strcmp(cmd, "build") == 0 || strcmp(cmd, "export") == 0 ||
                    (strcmp(cmd, "import") == 0 && (n == 2 || (n == 4 && strcmp(argv[i + 2], "--alias") == 0))) ||
                    (strcmp(cmd, "ls") == 0 && (n == 1 || (n == 2 && strcmp(argv[i + 1], "--json") == 0))) ||
                    ((strcmp(cmd, "verify") == 0 || strcmp(cmd, "rm") == 0) && n == 2);
    if (!shape_ok) {
        if (n > 1)
            fprintf(stderr, "airlock image %s: unexpected arguments from \"%s\"\n", cmd, argv[i + 1]);
        else
            fprintf(stderr, "airlock image: unknown command \"%s\"\n", cmd);
        return usage();
    }
    al_error err = { 0 };
    if (strcmp(cmd, "build") == 0)
        return build(images, argc - i - 1, argv + i + 1);
#ifdef AIRLOCK_SERVER
    /* (the lean airlock hands `image import` and `export` over: see cli/main.c) */
    if (strcmp(cmd, "export") == 0)
        return export_cmd(images, argc - i - 1, argv + i + 1);
    if (strcmp(cmd, "import") == 0 && i + 1 < argc) {
        char digest[65];
        if (al_image_import(images, argv[i + 1], digest, &err) < 0) {
            fprintf(stderr, "airlock image import: %s: nothing was stored\n", err.msg);
            return 125;
        }
        if (i + 3 < argc && strcmp(argv[i + 2], "--alias") == 0 && al_image_alias(images, argv[i + 3], digest, &err) < 0) {
            fprintf(stderr, "airlock image import: %s\n", err.msg);
            return 125;
        }
        printf("sha256:%s\n", digest);
        return 0;
    }
#endif
    if (strcmp(cmd, "ls") == 0) {
        json_t *l = al_image_list(images);
        if (i + 1 < argc && strcmp(argv[i + 1], "--json") == 0) {
            char *s = json_dumps(l, JSON_INDENT(2));
            printf("%s\n", s ? s : "[]");
            free(s);
        } else {
            printf("%-73s %-10s %-9s %-21s %s\n", "DIGEST", "ALIASES", "SIZE", "CREATED", "HOLDS");
            size_t k;
            json_t *e;
            json_array_foreach(l, k, e) {
                char aliases[128] = "", holds[1024];
                size_t j;
                json_t *a;
                json_array_foreach(json_object_get(e, "aliases"), j, a) {
                    strncat(aliases, json_string_value(a), sizeof aliases - strlen(aliases) - 2);
                    strcat(aliases, " ");
                }
                al_image_holds_line(e, holds, sizeof holds);
                printf("%-73s %-10s %6.0f MB %-21s %s\n", json_string_value(json_object_get(e, "digest")), aliases,
                       (double)json_integer_value(json_object_get(e, "bytes")) / 1e6,
                       json_string_value(json_object_get(e, "created")) ?: "-", holds);
            }
            if (json_array_size(l) == 0)
                printf("(no images in %s: `airlock image --images %s build` makes the default)\n", images, images);
        }
        json_decref(l);
        return 0;
    }
    if ((strcmp(cmd, "verify") == 0 || strcmp(cmd, "rm") == 0) && i + 1 < argc) {
        char dir[PATH_MAX], digest[65];
        if (al_image_resolve(images, argv[i + 1], dir, sizeof dir, digest, &err) < 0) {
            fprintf(stderr, "airlock image %s: %s\n", cmd, err.msg);
            return 125;
        }
        if (strcmp(cmd, "rm") == 0) {
            if (al_image_remove(images, digest, &err) < 0) {
                fprintf(stderr, "airlock image rm: %s\n", err.msg);
                return 125;
            }
            printf("removed sha256:%s\n", digest);
            return 0;
        }
        int r = al_image_verify(dir, digest, &err);
        if (r < 0) {
            fprintf(stderr, "airlock image verify: %s\n", err.msg);
            return 125;
        }
        if (r == 0) {
            printf("sha256:%s: CHANGED: %s\n", digest, err.msg);
            return 1;
        }
        printf("sha256:%s: intact\n", digest);
        return 0;
    }
    return usage();
}
