/* cookie.h — reading a Cookie field's cookie-string (RFC 6265 §4.2.1 and
 * §5.4): name=value pairs split by ';'. Views only; nothing is copied. */
#ifndef XHTTP_CORE_COOKIE_H
#define XHTTP_CORE_COOKIE_H

#include <stdbool.h>

#include <xbase/str.h>

/** Finds the first pair named name (exact, case-sensitive) in one field's
 *  value. Spaces and tabs around a pair, its name and its value are
 *  ignored; a pair without '=' or with an empty name is skipped; a value
 *  wrapped in DQUOTEs comes without them. An empty name finds nothing. */
bool xHttpCookieFind(xStr cookies, xStr name, xStr *value);

#endif
