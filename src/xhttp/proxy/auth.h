/* auth.h — the proxy's auth subrequest (like nginx's auth_request), for
 * proxy.c: before a request goes upstream, its method, target and fields
 * (no body) go to an auth service, whose answer lets it through (with
 * fields of the answer copied onto it) or answers the client. Nothing
 * outside src/xhttp/proxy/ includes this. */
#ifndef XHTTP_PROXY_AUTH_H
#define XHTTP_PROXY_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include <xhttp/client.h>
#include <xhttp/proxy.h>
#include <xhttp/request.h>
#include <xhttp/response.h>

/** A proxy's auth service and what its answers give the request. */
typedef struct xProxyAuth xProxyAuth;

/** One request's check, from xProxyAuthStart to its done call. */
typedef struct xProxyAuthCheck xProxyAuthCheck;

/** conf's auth_* settings; *out NULL when auth_url is. XERR_INVALID (a bad
 *  URL), XERR_NOMEM. */
xErrno xProxyAuthCreate(const xHttpProxyConf *conf, xProxyAuth **out);

void xProxyAuthDestroy(xProxyAuth *auth);

/** Removes from fields (n of them) those the auth answer is to set, so a
 *  client cannot send them itself; returns how many remain. *leading, a
 *  count of fields from the first (those known well-formed), becomes how many
 *  of them remain, still first: the order is kept. */
size_t xProxyAuthStrip(const xProxyAuth *auth, xHttpClientField *fields, size_t n, size_t *leading);

/** How a check ended, valid during the done call. */
typedef struct xProxyAuthVerdict {
    bool allowed;                   /**< the request may go on, with copied added to it */
    const xHttpClientField *copied; /**< the answer's fields named in auth_copy (configured spelling) */
    size_t num_copied;
    int status;            /**< not allowed: the client's answer (401/403 as the service said, 502
                                for another answer, 503 when it could not be asked) */
    const char *challenge; /**< its WWW-Authenticate, or "" */
    const char *message;   /**< its body, a line saying why */
} xProxyAuthVerdict;

typedef void (*xProxyAuthDone)(void *arg, const xProxyAuthVerdict *verdict);

/** Asks the auth service about req with its fields (as the upstream would
 *  get them); done is called on a later turn. NULL when it could not start
 *  (the caller answers 503). */
xProxyAuthCheck *xProxyAuthStart(xProxyAuth *auth, xHttpClient *client, xHttpRequest *req,
                                 const xHttpClientField *fields, size_t n, xProxyAuthDone done, void *arg);

/** Drops a check under way (the client left): done is not called. */
void xProxyAuthCancel(xProxyAuthCheck *check);

#endif
