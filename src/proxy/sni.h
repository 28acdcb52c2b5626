/* The server name a TLS ClientHello asks for (RFC 6066 server_name), read
 * from the first bytes a client sends through a CONNECT tunnel. Pure;
 * fuzzed in tests/fuzz. */
#pragma once

#include <stddef.h>

/*
 * Returns 1 with the name (lower-cased) in NAME, 0 when the ClientHello has
 * no server_name, -EAGAIN when BUF does not yet hold the whole first record,
 * -EPROTO when the bytes are not a well-formed ClientHello in one record,
 * -EINVAL when it is one but its server name is not a plain host name (an
 * address, an empty label, a trailing dot, a byte no name holds): NAME then
 * holds it when it is printable, else "".
 */
int al_tls_sni(const unsigned char *buf, size_t len, char *name, size_t n);
