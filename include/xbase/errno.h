/* xbase/errno.h — error values shared by every xKit module. */
#ifndef XBASE_ERRNO_H
#define XBASE_ERRNO_H

#ifdef __cplusplus
extern "C" {
#endif

/* What this header declares is libxkit.so's API: exported, where the rest is hidden. */
#pragma GCC visibility push(default)

/** Result of an xKit call: XOK (0) or a negative error value. */
typedef enum xErrno {
    XOK = 0,
    XERR_INVALID = -1, /**< an argument is malformed or out of range */
    XERR_NOMEM = -2,   /**< an allocation failed */
    XERR_SYS = -3,     /**< a system call failed; see errno for details */
    XERR_ADDR = -4,    /**< a host name or address could not be resolved */
    XERR_BUSY = -5,    /**< the address or resource is already in use */
    XERR_STATE = -6,   /**< the call is not allowed in the object's current state */
    XERR_EXISTS = -7,  /**< the thing being added is already there */
    XERR_LIMIT = -8,   /**< a configured limit was reached */
    XERR_CLOSED = -9,  /**< the peer or the object is closed */
    XERR_TLS = -10,    /**< a TLS certificate, key or setting was refused */
} xErrno;

/** A short, static, human-readable description of err. */
const char *xErrnoString(xErrno err);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
