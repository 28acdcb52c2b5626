/*
 * What slow clients can hold of the daemon. libmicrohttpd's
 * connection_timeout_s closes a connection only after that long in
 * silence: a client that sends a byte a second never is silent, and 400
 * of them from 199 addresses held every one of max_connections = 256 (a
 * client with a valid key was locked out). The guard gives each request a
 * deadline, from the moment the connection (or its previous answer) left
 * it waiting for the client, to when its headers and body are in:
 * request_timeout_s, however the bytes trickle. And it keeps
 * connections_reserved of the slots for connections whose key was valid:
 * when the others would take more, the oldest of them that has not sent a
 * request is closed for the new one. docs/operations.md "What the service
 * withstands".
 */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>

typedef struct al_guard al_guard;

/* A guard over connections at most MAX at once, REQUEST_TIMEOUT_S to
 * bring in a request, RESERVED of the slots kept for authenticated ones
 * (negative: a quarter). Its watch runs in a thread of its own. */
int al_guard_new(int max_connections, int reserved, int request_timeout_s, al_guard **ret);
/* After MHD_stop_daemon: every connection has been closed. */
void al_guard_free(al_guard *g);

/* MHD_OPTION_NOTIFY_CONNECTION's callback, with the guard as CLS. */
void al_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode toe);
/* The request on C is in (or answered on its headers): no deadline while
 * it is answered, however long (a wait, an event stream). */
void al_guard_answering(struct MHD_Connection *c);
/* The request on C had a valid key: the connection may use the reserve. */
void al_guard_authenticated(struct MHD_Connection *c);
/* The answer on C is done: the next request's deadline starts now. */
void al_guard_request_done(struct MHD_Connection *c);
/* Connections closed so far for their deadline, and to keep the reserve. */
void al_guard_counts(al_guard *g, unsigned long long *ret_late, unsigned long long *ret_evicted);
