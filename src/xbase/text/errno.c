/* errno.c — descriptions of xErrno values. */
#include <xbase/errno.h>

const char *xErrnoString(xErrno err) {
    switch (err) {
    case XOK: return "success";
    case XERR_INVALID: return "invalid argument";
    case XERR_NOMEM: return "out of memory";
    case XERR_SYS: return "system call failed";
    case XERR_ADDR: return "address could not be resolved";
    case XERR_BUSY: return "address or resource already in use";
    case XERR_STATE: return "not allowed in the current state";
    case XERR_EXISTS: return "already exists";
    case XERR_LIMIT: return "limit reached";
    case XERR_CLOSED: return "closed";
    case XERR_TLS: return "TLS setup failed";
    }
    return "unknown error";
}
