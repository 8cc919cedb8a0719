/* cookie.c — one Cookie field's name=value pairs (cookie.h). */
#include "xhttp/core/cookie.h"

#include <string.h>

static bool is_space(char c) { return c == ' ' || c == '\t'; }

static xStr trim(const char *p, const char *end) {
    while (p < end && is_space(*p)) p++;
    while (end > p && is_space(end[-1])) end--;
    return (xStr){p, (size_t)(end - p)};
}

bool xHttpCookieFind(xStr cookies, xStr name, xStr *value) {
    if (name.len == 0) return false;
    const char *p = cookies.data, *end = p + cookies.len;
    while (p < end) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *pair_end = semi ? semi : end;
        const char *eq = memchr(p, '=', (size_t)(pair_end - p));
        if (eq) {
            xStr key = trim(p, eq);
            if (key.len == name.len && memcmp(key.data, name.data, name.len) == 0) {
                xStr v = trim(eq + 1, pair_end);
                if (v.len >= 2 && v.data[0] == '"' && v.data[v.len - 1] == '"')
                    v = (xStr){v.data + 1, v.len - 2};
                *value = v;
                return true;
            }
        }
        p = semi ? semi + 1 : end;
    }
    return false;
}
