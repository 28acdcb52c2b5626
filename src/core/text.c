/*
 * Small conversions of the store's text that every part of the core uses:
 * a document column parsed, and RFC 3339 times (the store's) of now plus
 * an offset. Pure, or the clock only: below everything else of the core.
 */
#include <string.h>
#include <time.h>

#include "service.h"

json_t *al_json_text(const char *text) {
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    return j ? j : json_null();
}

void al_rfc3339_after(int64_t secs, char *buf, size_t len) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    time_t t = ts.tv_sec + secs;
    struct tm tm;
    gmtime_r(&t, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03ldZ", base, ts.tv_nsec / 1000000);
}

bool al_rfc3339_valid(const char *t) {
    /* YYYY-MM-DDTHH:MM:SS[.fff][Z]: what the store writes and compares */
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    size_t n = strlen(t);
    if (n < 19 || n > 40)
        return false;
    for (size_t i = 0; i < 19; i++)
        if (shape[i] == 'd' ? (t[i] < '0' || t[i] > '9') : t[i] != shape[i])
            return false;
    for (size_t i = 19; i < n; i++)
        if (!((t[i] >= '0' && t[i] <= '9') || t[i] == '.' || t[i] == 'Z'))
            return false;
    /* and a real calendar time: month 1-12, day 1-31, 23:59:60 at most */
    int mo = (t[5] - '0') * 10 + (t[6] - '0'), d = (t[8] - '0') * 10 + (t[9] - '0');
    int h = (t[11] - '0') * 10 + (t[12] - '0'), mi = (t[14] - '0') * 10 + (t[15] - '0');
    int se = (t[17] - '0') * 10 + (t[18] - '0');
    return mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h <= 23 && mi <= 59 && se <= 60;
}

void al_cluster_time_after(int64_t ms, char *buf, size_t len) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t t = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + ms;
    time_t sec = (time_t)(t / 1000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03dZ", base, (int)(t % 1000));
}
