/* connection.h — HTTP/3 (RFC 9114) on a QUIC connection: the application the
 * QUIC layer (xnet/quic/) serves. Control streams and SETTINGS both ways,
 * QPACK's encoder and decoder streams, request streams read with frame.h's
 * reader and QPACK's decoder, checked with HTTP/2's request checks and handed
 * to the router as exchanges, so the same handlers answer every protocol.
 *
 * An endpoint serving HTTP/3 is made with .app = &xH3App and .app_arg the
 * worker's xHttpContext. */
#ifndef XHTTP_HTTP3_CONNECTION_H
#define XHTTP_HTTP3_CONNECTION_H

#include "xnet/quic/quic.h"

/** HTTP/3 as the QUIC layer's application. */
extern const xQuicAppOps xH3App;

/** H3_NO_ERROR, for the endpoint's conf.app_no_error. */
#define XH3_APP_NO_ERROR 0x100

#endif
