/* xkit.h — every public xKit header at once, and the library's version.
 *
 * XKIT_VERSION_* say which headers a program was compiled with;
 * xKitVersion() says which library it runs with. CMake reads the version
 * from this file, so it is stated once. */
#ifndef XKIT_H
#define XKIT_H

#define XKIT_VERSION_MAJOR 0
#define XKIT_VERSION_MINOR 3
#define XKIT_VERSION_PATCH 0

#include <xbase/buffer.h>
#include <xbase/errno.h>
#include <xbase/event.h>
#include <xbase/json.h>
#include <xbase/log.h>
#include <xbase/str.h>
#include <xdb/pg.h>
#include <xdb/redis.h>
#include <xdb/redis_cache.h>
#include <xhttp/compress.h>
#include <xhttp/grpc.h>
#include <xhttp/observe.h>
#include <xhttp/proxy.h>
#include <xhttp/request.h>
#include <xhttp/response.h>
#include <xhttp/server.h>
#include <xhttp/client.h>
#include <xhttp/static.h>
#include <xhttp/tls.h>
#include <xhttp/tls_conf.h>
#include <xhttp/websocket.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

/** The running library's version, "MAJOR.MINOR.PATCH" (static storage). */
const char *xKitVersion(void);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
