#include "status.h"

unsigned al_status_http(al_status st) {
    static const unsigned http[_AL_STATUS_MAX] = {
        [AL_STATUS_OK] = 200,
        [AL_STATUS_CREATED] = 201,
        [AL_STATUS_INVALID] = 400,
        [AL_STATUS_PAYMENT_REQUIRED] = 402,
        [AL_STATUS_FORBIDDEN] = 403,
        [AL_STATUS_NOT_FOUND] = 404,
        [AL_STATUS_CONFLICT] = 409,
        [AL_STATUS_TOO_LARGE] = 413,
        [AL_STATUS_BUSY] = 429,
        [AL_STATUS_INTERNAL] = 500,
        [AL_STATUS_UNAVAILABLE] = 503,
        [AL_STATUS_QUOTA] = 507,
        [AL_STATUS_GONE] = 410,
    };
    return (unsigned)st < _AL_STATUS_MAX && http[st] ? http[st] : 500;
}
