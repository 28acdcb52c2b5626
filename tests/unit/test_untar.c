/* The one unpacker of a box's /out tar (box/untar.c, the docker and
 * Kubernetes boxes'): a name or a hard link's target too long for its
 * buffer is skipped and named, never cut into another name. No box. */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "box/collect.h"
#include "box/untar.h"
#include "check.h"

static void add(struct archive *w, const char *name, const char *link, const char *data) {
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    if (link) {
        archive_entry_set_hardlink(e, link);
        archive_entry_set_size(e, 0);
    } else {
        archive_entry_set_size(e, (la_int64_t)strlen(data));
    }
    archive_write_header(w, e);
    if (!link)
        archive_write_data(w, data, strlen(data));
    archive_entry_free(e);
}

static bool skipped(const al_box_result *r, const char *prefix) {
    for (size_t i = 0; i < r->n_skipped; i++)
        if (strncmp(r->skipped[i].path, prefix, strlen(prefix)) == 0)
            return true;
    return false;
}

int main(void) {
    int tarfd = memfd_create("untar-test", MFD_CLOEXEC);
    struct archive *w = archive_write_new();
    archive_write_set_format_pax(w);
    archive_write_open_fd(w, tarfd);
    /* "./keep" and 5000 bytes of "./aaaa...": cut at 4095 it is "./aaa..."
     * of another length, a name the box never made */
    char *longname = malloc(5001);
    memset(longname, 'a', 5000);
    memcpy(longname, "./", 2);
    longname[5000] = '\0';
    add(w, "./keep", NULL, "kept\n");
    add(w, longname, NULL, "long\n");
    /* a hard link whose target, cut, would be "./keep" */
    char *longtgt = malloc(5001);
    for (int i = 0; i < 4090; i += 2)
        memcpy(longtgt + i, "./", 2);
    memcpy(longtgt + 4090, "/keep", 5);
    memset(longtgt + 4095, 'x', 905);
    longtgt[5000] = '\0';
    add(w, "./link", longtgt, NULL);
    /* past the depth cap (16): collect's rule names it, not a long-name skip */
    char deep[6000] = "./";
    for (int i = 0; i < 20; i++) {
        size_t at = strlen(deep);
        memset(deep + at, 'z', 250);
        deep[at + 250] = '/';
        deep[at + 251] = '\0';
    }
    strcat(deep, "f");
    add(w, deep, NULL, "deep\n");
    archive_write_close(w);
    archive_write_free(w);
    lseek(tarfd, 0, SEEK_SET);

    char dir[] = "/tmp/airlock-untar-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int outfd = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    al_collect_limits cl = { .max_files = 100, .max_file_bytes = 1 << 20, .max_total_bytes = 1 << 20,
                             .max_depth = 16, .max_entries = 1000, .uid = geteuid(), .gid = getegid() };
    al_box_result res = { 0 };
    al_error err = { 0 };
    CHECK(al_untar("out", &cl, tarfd, outfd, &res, &err) == 0);
    struct stat st;
    CHECK(fstatat(outfd, "keep", &st, 0) == 0 && st.st_nlink == 1);
    CHECK(skipped(&res, "./aaaa"));
    CHECK(!skipped(&res, "./zzzz"));
    CHECK(fstatat(outfd, "link", &st, AT_SYMLINK_NOFOLLOW) < 0);
    /* nothing but keep was made */
    CHECK(faccessat(outfd, longname + 2, F_OK, 0) < 0);
    char cut[4096];
    snprintf(cut, sizeof cut, "%s", longname + 2);
    cut[255] = '\0';
    CHECK(faccessat(outfd, cut, F_OK, 0) < 0);
    al_box_result_free(&res);
    close(outfd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(longname);
    free(longtgt);
    close(tarfd);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
