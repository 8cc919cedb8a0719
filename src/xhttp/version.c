/* version.c — the library's own version, for xKitVersion(). */
#include <xkit.h>

#define XKIT_STRINGIFY(x) #x
#define XKIT_VERSION_STRING(a, b, c) XKIT_STRINGIFY(a) "." XKIT_STRINGIFY(b) "." XKIT_STRINGIFY(c)

const char *xKitVersion(void) {
    return XKIT_VERSION_STRING(XKIT_VERSION_MAJOR, XKIT_VERSION_MINOR, XKIT_VERSION_PATCH);
}
