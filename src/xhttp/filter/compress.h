/* compress.h — the compression filter: what server.c sets up per worker
 * when xHttpServerCompress turned compression on (<xhttp/compress.h>). */
#ifndef XHTTP_FILTER_COMPRESS_H
#define XHTTP_FILTER_COMPRESS_H

#include <xhttp/compress.h>

#include "xhttp/core/context.h"

/** The server's settings, checked and copied once, read by every worker. */
typedef struct xCompressConf xCompressConf;

/** Checks opts (NULL: the defaults) and copies them. *conf gets the copy,
 *  the caller's to free with xCompressConfDestroy. XERR_INVALID, XERR_NOMEM. */
xErrno xCompressConfCreate(const xHttpCompressOptions *opts, xCompressConf **conf);

/** Frees a conf no worker uses any more. */
void xCompressConfDestroy(xCompressConf *conf);

/** One worker's filter, compressing as conf says (conf must outlive it);
 *  NULL when out of memory. Its compressors are made on first use. */
xHttpFilter *xCompressFilterCreate(const xCompressConf *conf);

/** Frees a worker's filter once no response uses it; NULL is ignored. */
void xCompressFilterDestroy(xHttpFilter *filter);

#endif
