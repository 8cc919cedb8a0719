/* quic_tls.h — QUIC's TLS 1.3 handshake through GnuTLS (OpenSSL 3.0 has no
 * QUIC API), with ngtcp2's crypto helpers doing the key work: the listener's
 * certificates and keys (the same files its TCP side serves), ALPN "h3".
 * GnuTLS stays behind this header: nothing here names its types. */
#ifndef XNET_QUIC_QUIC_TLS_H
#define XNET_QUIC_QUIC_TLS_H

#include <stddef.h>
#include <stdint.h>

#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <xbase/errno.h>
#include <xhttp/tls_conf.h>

/** A listener's certificates, shared by every worker's connections; a
 *  reload swaps them for new sessions while those under way keep theirs. */
typedef struct xQuicTls xQuicTls;

/** Loads conf's certificate and SNI certificates (GnuTLS picks among them by
 *  the names the certificates carry). NULL with error filled on failure. */
xQuicTls *xQuicTlsCreate(const xTlsConf *conf, char *error, size_t error_size);

/** Reads the certificate files again; on failure (XERR_TLS, error filled)
 *  the loaded ones stay. Callable from any thread. */
xErrno xQuicTlsReload(xQuicTls *tls, char *error, size_t error_size);

/** Frees tls once no session uses it. */
void xQuicTlsDestroy(xQuicTls *tls);

/** Starts the server side of conn's handshake: a session whose pointer is ref
 *  (ngtcp2's crypto callbacks find conn through it). Returns the session, or
 *  NULL when GnuTLS refuses. */
void *xQuicTlsSessionStart(xQuicTls *tls, ngtcp2_conn *conn, ngtcp2_crypto_conn_ref *ref);

/** Ends a session from xQuicTlsSessionStart (NULL: none). */
void xQuicTlsSessionEnd(void *session);

/** Fills info from a finished handshake; the server name goes into
 *  name[size] and info points at it. */
void xQuicTlsDescribe(void *session, xTlsInfo *info, char *name, size_t size);

/** Fills p with len bytes from the TLS library's generator. */
void xQuicTlsRandom(uint8_t *p, size_t len);

#endif
