/* preface.c — the PROXY header the proxy sends upstream (preface.h). The
 * source is the front connection's peer, which a trusted PROXY header at
 * the front has already replaced with the client's; the destination is the
 * address and port the front connection reached (getsockname). */
#include "xhttp/proxy/preface.h"

#include <sys/socket.h>

#include "xhttp/core/exchange.h"
#include "xnet/connection.h"

size_t xProxyPreface(xHttpResponse *res, int version, uint8_t *out) {
    const xConn *front = xHttpExchangeOfResponse(res)->req.conn;
    xNetAddr source = {0}, destination = {0};
    if (front) {
        source = front->addr;
        struct sockaddr_storage local;
        socklen_t len = sizeof local;
        if (getsockname(front->fd, (struct sockaddr *)&local, &len) == 0)
            xNetAddrSet(&destination, &local, 0);
    }
    return xProxyWrite(version, &source, &destination, out);
}
