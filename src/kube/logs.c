/* A pod's logs (kube_int.h): main's, the run's output, kept and capped as
 * the native box keeps a stream; collect's, /out as a base64 tar between
 * two marker lines, decoded to a file with a bound. Every byte is the
 * API server's (and, inside, the box's): hostile. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kube_int.h"

void al_kube_out_init(al_kube_out *o, int fd, uint64_t max) {
    memset(o, 0, sizeof *o);
    o->fd = fd;
    o->max = max;
}

static int b64val(unsigned char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

static void fail(al_kube_out *o, const char *why) {
    o->state = AL_KOUT_FAILED;
    snprintf(o->why, sizeof o->why, "%s", why);
}

/* one base64 line (no newline) decoded onto O->fd, quads carried across
 * lines (coreutils wraps at 76, a multiple of 4, but nothing relies on it) */
static int body_line(al_kube_out *o, const char *s, size_t n) {
    unsigned char out[3072];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\r' || c == ' ')
            continue;
        if (o->pad && c != '=') {
            fail(o, "/out's stream has data after its padding");
            return 0;
        }
        int v = c == '=' ? 0 : b64val(c);
        if (v < 0) {
            fail(o, "/out's stream holds a byte that is not base64");
            return 0;
        }
        if (c == '=' && o->nq < 2) {
            fail(o, "/out's stream has bad padding");
            return 0;
        }
        if (c == '=')
            o->pad++;
        o->quad[o->nq++] = (unsigned char)v;
        if (o->nq == 4) {
            /* canonical only: the bits a padded quantum drops are zero
             * (RFC 4648 3.5), so one tar has one encoding */
            if ((o->pad == 2 && (o->quad[1] & 0x0f)) || (o->pad == 1 && (o->quad[2] & 0x03))) {
                fail(o, "/out's stream has bits after its last byte");
                return 0;
            }
            unsigned char b[3] = { (unsigned char)(o->quad[0] << 2 | o->quad[1] >> 4),
                                   (unsigned char)(o->quad[1] << 4 | o->quad[2] >> 2),
                                   (unsigned char)(o->quad[2] << 6 | o->quad[3]) };
            size_t m = 3 - (size_t)o->pad;
            memcpy(out + k, b, m);
            k += m;
            o->nq = 0;
            if (k + 3 > sizeof out) {
                if (al_write_all(o->fd, out, k) < 0)
                    return -errno;
                k = 0;
            }
        }
    }
    if (k && al_write_all(o->fd, out, k) < 0)
        return -errno;
    return 0;
}

static int line(al_kube_out *o, const char *s, size_t n) {
    static const char begin[] = "airlock-out-begin", end[] = "airlock-out-end ";
    if (o->state == AL_KOUT_BEFORE) {
        /* "airlock-collect-ready" and anything else before the tar */
        if (n == sizeof begin - 1 && memcmp(s, begin, n) == 0)
            o->state = AL_KOUT_IN;
        return 0;
    }
    if (o->state != AL_KOUT_IN && o->state != AL_KOUT_DONE)
        return 0;
    if (o->state == AL_KOUT_IN && n >= sizeof end - 1 && memcmp(s, end, sizeof end - 1) == 0) {
        /* the pipeline's status (base64's: `$?` of `tar | base64`; what
         * tar could not read, a file the script made unreadable, is in its
         * messages): the run's outcome, never airlock's error */
        /* S is not NUL-terminated: what follows it in the line buffer is an
         * earlier, longer line's (base64, digits among it), so the status
         * is read within its N bytes only, never by strspn or atoi */
        const char *st = s + sizeof end - 1;
        size_t sn = n - (sizeof end - 1);
        int status = 0;
        bool digits = sn > 0 && sn <= 3;
        for (size_t i = 0; digits && i < sn; i++) {
            digits = st[i] >= '0' && st[i] <= '9';
            status = status * 10 + (st[i] - '0');
        }
        if (!digits)
            fail(o, "the collect sidecar's end line holds no status");
        else if (o->nq)
            fail(o, "/out's stream ended inside a base64 quantum");
        else {
            o->tar_status = status;
            o->state = AL_KOUT_DONE;
        }
        return 0;
    }
    if (n >= 5 && memcmp(s, "tar: ", 5) == 0) {
        /* (after the end line too: tar's stderr and the echo's stdout are
         * two pipes, which the runtime merges in the order it reads them) */
        /* tar's stderr, merged into the log by the API server */
        if (o->n_tar_msgs < (int)(sizeof o->tar_msgs / sizeof *o->tar_msgs)) {
            size_t k = n < sizeof o->tar_msgs[0] ? n : sizeof o->tar_msgs[0] - 1;
            memcpy(o->tar_msgs[o->n_tar_msgs], s, k);
            o->tar_msgs[o->n_tar_msgs++][k] = '\0';
        }
        return 0;
    }
    if (o->over || o->state == AL_KOUT_DONE)
        return 0;
    if (o->seen + n > o->max) {
        /* the tar is cut here: what was decoded is unpacked, and its last
         * file skipped (untar.h) */
        o->over = true;
        return 0;
    }
    o->seen += n;
    return body_line(o, s, n);
}

int al_kube_out_feed(al_kube_out *o, const char *buf, size_t len) {
    /* past the bound nothing more is read: the tar is cut there (a sparse
     * file makes the sidecar's stream as long as the file's apparent size,
     * which costs the script nothing) */
    while (len && o->state != AL_KOUT_FAILED && !o->over) {
        const char *nl = memchr(buf, '\n', len);
        size_t take = nl ? (size_t)(nl - buf) : len;
        if (o->long_line) {
            /* the rest of a line already judged */
        } else if (o->len + take > sizeof o->line) {
            /* longer than any marker or base64 line: tar's message about
             * a long name of the script's (kept cut), else not ours */
            if (o->state == AL_KOUT_IN || o->state == AL_KOUT_DONE) {
                memcpy(o->line + o->len, buf, sizeof o->line - o->len);
                bool tar = memcmp(o->line, "tar: ", 5) == 0;
                if (!tar && o->state == AL_KOUT_IN) {
                    fail(o, "/out's stream holds a line too long to be base64");
                    return 0;
                }
                if (tar)
                    line(o, o->line, sizeof o->tar_msgs[0] - 1);
            }
            o->long_line = true;
            o->len = 0;
        } else {
            memcpy(o->line + o->len, buf, take);
            o->len += take;
        }
        buf += take;
        len -= take;
        if (!nl)
            break;
        buf++;
        len--;
        int r = o->long_line ? 0 : line(o, o->line, o->len);
        o->len = 0;
        o->long_line = false;
        if (r < 0)
            return r;
    }
    return 0;
}
