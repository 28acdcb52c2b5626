/* collect's log as the driver reads it (kube/logs.c, al_kube_out_feed),
 * against what the script in the pod can make tar say and what the
 * runtime's merging of two pipes does: tar's message about a long name of
 * the script's is a message (kept cut), never "a line too long to be
 * base64" (airlock's error); tar's messages after the end line are kept;
 * past the bound nothing more is read. No cluster. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "kube/kube_int.h"

static int memfd(void) { return memfd_create("kube-out-test", MFD_CLOEXEC); }

static void feed(al_kube_out *o, const char *s) { al_kube_out_feed(o, s, strlen(s)); }

/* "tar: ./NAME: Cannot open: Permission denied\n", NAME N bytes long */
static char *tar_message(size_t n) {
    char *m = malloc(n + 64);
    strcpy(m, "tar: ./");
    memset(m + 7, 'd', n);
    strcpy(m + 7 + n, ": Cannot open: Permission denied\n");
    return m;
}

static void long_tar_message_is_a_message(void) {
    al_kube_out o;
    int fd = memfd();
    al_kube_out_init(&o, fd, 1 << 20);
    feed(&o, "airlock-collect-ready\nairlock-out-begin\nQUJD\n");
    char *m = tar_message(9000);
    /* in pieces, as a stream comes */
    al_kube_out_feed(&o, m, 3000);
    al_kube_out_feed(&o, m + 3000, strlen(m) - 3000);
    free(m);
    feed(&o, "REVG\nairlock-out-end 0\n");
    CHECK(o.state == AL_KOUT_DONE);
    CHECK(o.n_tar_msgs == 1 && strncmp(o.tar_msgs[0], "tar: ./ddd", 10) == 0);
    CHECK(lseek(fd, 0, SEEK_END) == 6);
    close(fd);
}

static void long_other_line_is_refused(void) {
    al_kube_out o;
    int fd = memfd();
    al_kube_out_init(&o, fd, 1 << 20);
    feed(&o, "airlock-out-begin\n");
    char *m = tar_message(9000);
    m[0] = 'x';
    feed(&o, m);
    free(m);
    CHECK(o.state == AL_KOUT_FAILED && strstr(o.why, "too long"));
    close(fd);
}

static void tar_message_after_the_end_line(void) {
    al_kube_out o;
    int fd = memfd();
    al_kube_out_init(&o, fd, 1 << 20);
    feed(&o, "airlock-out-begin\nQUJD\nairlock-out-end 0\ntar: ./x: Cannot open: Permission denied\n");
    char *m = tar_message(5000);
    feed(&o, m);
    free(m);
    /* nothing after the end line is the tar, nor another end */
    feed(&o, "REVG\nairlock-out-end 2\n");
    CHECK(o.state == AL_KOUT_DONE && o.tar_status == 0);
    CHECK(o.n_tar_msgs == 2 && strcmp(o.tar_msgs[0], "tar: ./x: Cannot open: Permission denied") == 0);
    CHECK(lseek(fd, 0, SEEK_END) == 3);
    close(fd);
}

static void nothing_read_past_the_bound(void) {
    al_kube_out o;
    int fd = memfd();
    al_kube_out_init(&o, fd, 8);
    feed(&o, "airlock-out-begin\nQUJD\nREVG\nR0hJ\nairlock-out-end 0\n");
    CHECK(o.over && o.state == AL_KOUT_IN && o.seen == 8);
    CHECK(lseek(fd, 0, SEEK_END) == 6);
    close(fd);
}

/* the end line is shorter than the base64 line before it, whose bytes stay
 * in the line buffer past it: digits there are not tar's status */
static void end_status_is_the_end_lines_own(void) {
    al_kube_out o;
    int fd = memfd();
    al_kube_out_init(&o, fd, 1 << 20);
    feed(&o, "airlock-out-begin\nQUJDQUJDQUJDQUJDQ123\nairlock-out-end 0\n");
    CHECK(o.state == AL_KOUT_DONE && o.tar_status == 0);
    close(fd);
    fd = memfd();
    al_kube_out_init(&o, fd, 1 << 20);
    feed(&o, "airlock-out-begin\nQUJDQUJDQUJDQUJDQ123\nairlock-out-end 2\n");
    CHECK(o.state == AL_KOUT_DONE && o.tar_status == 2);
    close(fd);
    fd = memfd();
    al_kube_out_init(&o, fd, 1 << 20);
    feed(&o, "airlock-out-begin\nQUJDQUJDQUJDQUJDQ123\nairlock-out-end 1x\n");
    CHECK(o.state == AL_KOUT_FAILED && strstr(o.why, "no status"));
    close(fd);
}

int main(void) {
    long_tar_message_is_a_message();
    long_other_line_is_refused();
    tar_message_after_the_end_line();
    nothing_read_past_the_bound();
    end_status_is_the_end_lines_own();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
