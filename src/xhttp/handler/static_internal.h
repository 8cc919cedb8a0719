/* static_internal.h — the static file handler's state and its path
 * resolution, apart from the handler so the fuzz harness can drive both
 * lookups (openat2 and the component walk) on any path. */
#ifndef XHTTP_HANDLER_STATIC_INTERNAL_H
#define XHTTP_HANDLER_STATIC_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <sys/stat.h>

#include <xhttp/static.h>

struct xHttpStatic {
    int root_fd;
    bool beneath; /* openat2 keeps every lookup under root; else the component walk */
    bool precompressed;
    char *index; /* NULL: none */
    char *cache_control;
    xHttpStaticType *types; /* the caller's, before the built-in table */
    size_t num_types;
};

/* Room for a decoded path, then the index name or a twin's suffix. */
#define XSTATIC_NAME_ROOM (PATH_MAX + NAME_MAX + 4)

/** What a request's path names under the root. */
typedef struct xHttpStaticTarget {
    char name[XSTATIC_NAME_ROOM]; /**< decoded, relative to the root, index added */
    size_t len;
    int fd;         /**< the regular file, open, when status is 0; else -1 */
    struct stat st; /**< its status, when status is 0 */
    int status;     /**< 0, or the answer instead: 301 (a directory named without
                         its '/', when there is an index), 403 or 404 */
} xHttpStaticTarget;

/** Resolves raw, the path as the request has it (not yet percent-decoded),
 *  under files' root into t. */
void xHttpStaticResolve(const xHttpStatic *files, xStr raw, xHttpStaticTarget *t);

#endif
