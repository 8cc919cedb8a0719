/* xhttp/tls.h — HTTPS: TLS listeners for an xHttpServer, through OpenSSL 3.
 *
 * A TLS listener serves HTTP/1.1 and HTTP/2 on one port; ALPN picks the
 * protocol per connection. Plain and TLS listeners may be mixed on one server.
 * Every worker handshakes on its own SO_REUSEPORT socket, inside its own loop.
 * After the handshake, where the kernel offers kernel TLS (kTLS), record
 * encryption moves to the kernel; elsewhere xKit's own record layer takes the
 * records from OpenSSL (AEAD suites: xTlsConf.xkit_records) and OpenSSL's
 * per-connection state is freed; any other suite stays with OpenSSL. No
 * difference a client or handler could see, but memory and CPU.
 *
 * The settings and info types are in <xhttp/tls_conf.h>, included here.
 * Nothing here exposes OpenSSL's types: this header needs no OpenSSL headers. */
#ifndef XHTTP_TLS_H
#define XHTTP_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xhttp/server.h>
#include <xhttp/tls_conf.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

/** Like xHttpServerListen, serving TLS. Certificates, keys, the CA file,
 *  cipher names and groups are all checked here: a bad one fails the call
 *  with XERR_TLS (XERR_INVALID for a malformed conf), and
 *  xHttpServerLastError says which and why. The first TLS listener also logs
 *  once whether kernel TLS is available. */
xErrno xHttpServerListenTls(xHttpServer *server, const char *host, uint16_t port, const xTlsConf *conf);

/** Like xHttpServerListenFd, serving TLS with conf (checked as
 *  xHttpServerListenTls checks it). */
xErrno xHttpServerListenTlsFd(xHttpServer *server, int fd, const xTlsConf *conf);

/** Like xHttpServerListenSystemd, serving TLS with conf on the sockets taken. */
xErrno xHttpServerListenTlsSystemd(xHttpServer *server, const char *name, const xTlsConf *conf, int *count);

/** Reads every TLS listener's certificate, key and CA files again. New
 *  connections get the new certificates; established ones keep theirs. On
 *  failure nothing changes: XERR_TLS, with xHttpServerLastError set. Callable
 *  from any thread while the server runs; a server with conf.handle_signals
 *  also does this on SIGHUP. */
xErrno xHttpServerReloadTls(xHttpServer *server);

/** Fills the first size bytes of info (the caller's sizeof(xTlsInfo)).
 *  Call xHttpRequestTls instead. */
bool xHttpRequestTlsSized(const xHttpRequest *req, xTlsInfo *info, size_t size);

/** Fills info for a request that came over TLS; false for a plain one.
 *  Strings stay valid until the response ends. */
static inline bool xHttpRequestTls(const xHttpRequest *req, xTlsInfo *info) {
    return xHttpRequestTlsSized(req, info, sizeof *info);
}

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
