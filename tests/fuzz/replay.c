/*
 * The fuzz targets' driver when libFuzzer is not linked (gcc builds, and
 * `make check`): replays every file of the directories named on the command
 * line through LLVMFuzzerTestOneInput, in name order, so a committed corpus
 * and every past reproducer run as fast, deterministic regression tests.
 * A target may define fuzz_replay_check() to say whether the corpus still
 * reaches its deep paths (a corpus that only exercises refusals proves
 * little); a missing or empty directory fails, so a lost corpus is noticed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
int fuzz_replay_check(void) __attribute__((weak));

/* the largest input replayed: libFuzzer's own default -max_len is far below */
#define REPLAY_MAX (64u << 20)

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

static int replay_file(int dirfd, const char *dir, const char *name) {
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > REPLAY_MAX) {
        fprintf(stderr, "replay: %s/%s: not a readable regular file of at most %u bytes\n", dir, name, REPLAY_MAX);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    size_t len = (size_t)st.st_size, got = 0;
    /* an exact-size heap copy, so a read past the input's end is caught */
    uint8_t *buf = malloc(len ? len : 1);
    while (buf && got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (!buf || got != len) {
        fprintf(stderr, "replay: %s/%s: short read\n", dir, name);
        free(buf);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR... (replays every file of each DIR)\n", argv[0]);
        return 2;
    }
    long total = 0;
    for (int i = 1; i < argc; i++) {
        int dirfd = open(argv[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct dirent **ents = NULL;
        int n = dirfd >= 0 ? scandir(argv[i], &ents, NULL, by_name) : -1;
        if (n < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        long here = 0;
        for (int k = 0; k < n; k++) {
            if (ents[k]->d_name[0] != '.') {
                if (replay_file(dirfd, argv[i], ents[k]->d_name) < 0)
                    return 1;
                here++;
            }
            free(ents[k]);
        }
        free(ents);
        close(dirfd);
        if (here == 0) {
            fprintf(stderr, "replay: %s holds no input\n", argv[i]);
            return 1;
        }
        printf("replayed %ld inputs of %s\n", here, argv[i]);
        total += here;
    }
    if (fuzz_replay_check && fuzz_replay_check() != 0) {
        fprintf(stderr, "replay: the corpus no longer reaches the target's deep paths\n");
        return 1;
    }
    printf("%ld inputs, no report\n", total);
    return 0;
}
