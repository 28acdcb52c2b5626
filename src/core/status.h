/* What a core operation answers: an outcome, not a wire's code. The API
 * layer maps it to an HTTP status (al_status_http, src/api/status.c), and
 * MCP and Piston to their own shapes; the error document a core call
 * returns beside it ({"error": {code, message}}) says which refusal. */
#pragma once

typedef enum al_status {
    AL_STATUS_OK,               /* done; what was asked for */
    AL_STATUS_CREATED,          /* done; something new was made */
    AL_STATUS_INVALID,          /* the request is malformed or breaks a rule of its shape */
    AL_STATUS_PAYMENT_REQUIRED, /* the organisation has not the credits */
    AL_STATUS_FORBIDDEN,        /* the principal may not (role, allow-list, network policy) */
    AL_STATUS_NOT_FOUND,        /* no such thing for this principal */
    AL_STATUS_CONFLICT,         /* the state of things refuses it (a bundled skill, a key used otherwise) */
    AL_STATUS_TOO_LARGE,        /* over a size limit of the request */
    AL_STATUS_BUSY,             /* a queue is full: try again later */
    AL_STATUS_INTERNAL,         /* our fault: the store, memory, the audit trail */
    AL_STATUS_UNAVAILABLE,      /* cannot be done now (settings unreadable, driver disabled) */
    AL_STATUS_QUOTA,            /* the organisation's storage quota has no room */
    AL_STATUS_GONE,             /* it was, and is no more (a run past its retention) */
    _AL_STATUS_MAX,
} al_status;
