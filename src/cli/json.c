/* Bytes rendered for a terminal. */
#include <stdio.h>

#include "cli.h"

void cli_write_safe(FILE *f, const char *buf, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f))
            fputc(c, f);
        else if (c == 0x1b)
            fputs("^[", f);
        else if (c < 0x20)
            fprintf(f, "^%c", c + '@');
        else
            fputs("^?", f);
    }
}
