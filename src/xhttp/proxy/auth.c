/* auth.c — the auth subrequest (auth.h).
 *
 * The check is a bodiless request to the auth service with the original
 * method (HEAD and GET as they are, others too: the service decides) or
 * auth_method, the original target or auth_target, the fields the upstream
 * would get, and X-Original-Method and X-Original-URI. A 2xx lets the request through;
 * 401 and 403 go back to the client with the service's WWW-Authenticate;
 * any other status is the service misbehaving (502), and a service that
 * cannot be asked (refused, timed out, invalid answer) leaves the proxy
 * unable to decide (503). Nothing is cached: every request asks. */
#include "xhttp/proxy/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xhttp/core/tokens.h"

#define AUTH_MAX_COPY 8
#define AUTH_TEXT 4096 /* the copied fields' values, and WWW-Authenticate */
#define AUTH_MAX_FIELDS 136

struct xProxyAuth {
    xHttpUpstream *upstream;
    char *target; /* NULL: the original request's */
    char *method; /* NULL: the original request's */
    char *copy[AUTH_MAX_COPY];
    size_t num_copy;
};

struct xProxyAuthCheck {
    xProxyAuth *auth;
    xHttpClientRequest *up;
    xProxyAuthDone done;
    void *arg;
    int status;
    xHttpClientField copied[AUTH_MAX_COPY];
    size_t num_copied;
    char text[AUTH_TEXT]; /* copied values, then the challenge */
    size_t used;
    char challenge[512]; /* WWW-Authenticate, NUL-terminated */
};

static const xHttpClientHandlers auth_handlers;

void xProxyAuthDestroy(xProxyAuth *auth) {
    if (!auth) return;
    xHttpUpstreamDestroy(auth->upstream);
    free(auth->target);
    free(auth->method);
    for (size_t i = 0; i < auth->num_copy; i++) free(auth->copy[i]);
    free(auth);
}

xErrno xProxyAuthCreate(const xHttpProxyConf *conf, xProxyAuth **out) {
    *out = NULL;
    if (!conf->auth_url) return XOK;
    if (conf->num_auth_copy > AUTH_MAX_COPY) return XERR_INVALID;
    xProxyAuth *auth = calloc(1, sizeof *auth);
    if (!auth) return XERR_NOMEM;
    xErrno err = xHttpUpstreamCreate(conf->auth_url, &conf->upstream, &auth->upstream);
    if (err == XOK && conf->auth_target && !(auth->target = strdup(conf->auth_target))) err = XERR_NOMEM;
    if (err == XOK && conf->auth_method && !(auth->method = strdup(conf->auth_method))) err = XERR_NOMEM;
    for (size_t i = 0; err == XOK && i < conf->num_auth_copy; i++) {
        if (!(auth->copy[i] = strdup(conf->auth_copy[i]))) err = XERR_NOMEM;
        auth->num_copy = i + 1;
    }
    if (err != XOK) {
        xProxyAuthDestroy(auth);
        return err;
    }
    *out = auth;
    return XOK;
}

/* The configured spelling of name when it is one the answer is to set. */
static const char *copied_name(const xProxyAuth *auth, xStr name) {
    for (size_t i = 0; i < auth->num_copy; i++)
        if (xHttpNameEquals(name, auth->copy[i])) return auth->copy[i];
    return NULL;
}

size_t xProxyAuthStrip(const xProxyAuth *auth, xHttpClientField *fields, size_t n, size_t *leading) {
    size_t kept = 0, leading_kept = 0;
    for (size_t i = 0; i < n; i++) {
        xStr name = fields[i].name;
        bool ours = copied_name(auth, name) != NULL || xHttpNameEquals(name, "x-original-method") ||
                    xHttpNameEquals(name, "x-original-uri");
        if (ours) continue;
        fields[kept++] = fields[i];
        leading_kept += i < *leading;
    }
    *leading = leading_kept;
    return kept;
}

/* Tells the proxy the client's answer, and ends the check. */
static void deny(xProxyAuthCheck *check, int status, const char *why) {
    char message[256];
    snprintf(message, sizeof message, "%d %s: %s\n", status, xHttpStatusReason(status), why);
    xProxyAuthVerdict verdict = {.status = status, .challenge = check->challenge, .message = message};
    xProxyAuthDone done = check->done;
    void *arg = check->arg;
    done(arg, &verdict);
    free(check);
}

/* Keeps a copy of value in the check's text; false when it is full. */
static bool keep(xProxyAuthCheck *check, xStr value, xStr *kept) {
    if (value.len > sizeof check->text - check->used) return false;
    memcpy(check->text + check->used, value.data, value.len);
    *kept = (xStr){check->text + check->used, value.len};
    check->used += value.len;
    return true;
}

static void on_auth_head(xHttpClientRequest *up, const xHttpClientResponse *r, void *arg) {
    (void)up;
    xProxyAuthCheck *check = arg;
    check->status = r->status;
    for (size_t i = 0; i < r->num_fields; i++) {
        const xHttpClientField *f = &r->fields[i];
        const char *name = copied_name(check->auth, f->name);
        if (r->status >= 200 && r->status < 300 && name && check->num_copied < AUTH_MAX_COPY) {
            xHttpClientField *c = &check->copied[check->num_copied];
            c->name = xStrFromC(name); /* NUL-terminated, as the proxy's fields want */
            if (keep(check, f->value, &c->value)) check->num_copied++;
        }
        if (xHttpNameEquals(f->name, "www-authenticate") && !check->challenge[0])
            snprintf(check->challenge, sizeof check->challenge, "%.*s", (int)f->value.len, f->value.data);
    }
}

static void on_auth_end(xHttpClientRequest *up, const xHttpClientField *trailers, size_t n, void *arg) {
    (void)up, (void)trailers, (void)n;
    xProxyAuthCheck *check = arg;
    check->up = NULL;
    if (check->status >= 200 && check->status < 300) {
        xProxyAuthVerdict verdict = {
            .allowed = true, .copied = check->copied, .num_copied = check->num_copied};
        check->done(check->arg, &verdict);
        free(check);
        return;
    }
    if (check->status == 401 || check->status == 403) {
        deny(check, check->status, "refused by the auth service");
        return;
    }
    check->challenge[0] = '\0';
    char why[64];
    snprintf(why, sizeof why, "the auth service answered %d", check->status);
    deny(check, 502, why);
}

static void on_auth_error(xHttpClientRequest *up, xHttpClientError error, bool started, void *arg) {
    (void)up, (void)started;
    xProxyAuthCheck *check = arg;
    check->up = NULL;
    check->challenge[0] = '\0';
    char why[128];
    snprintf(why, sizeof why, "the auth service could not be asked: %s", xHttpClientErrorString(error));
    deny(check, 503, why);
}

static const xHttpClientHandlers auth_handlers = {
    .on_head = on_auth_head,
    .on_end = on_auth_end,
    .on_error = on_auth_error,
};

xProxyAuthCheck *xProxyAuthStart(xProxyAuth *auth, xHttpClient *client, xHttpRequest *req,
                                 const xHttpClientField *fields, size_t n, xProxyAuthDone done, void *arg) {
    xProxyAuthCheck *check = calloc(1, sizeof *check);
    xHttpClientField all[AUTH_MAX_FIELDS];
    xStr path = xHttpRequestPath(req), query = xHttpRequestQuery(req);
    char uri[8192];
    int uri_len = snprintf(uri, sizeof uri, "%.*s%s%.*s", (int)path.len, path.data, query.len ? "?" : "",
                           (int)query.len, query.data);
    if (!check || n + 2 > AUTH_MAX_FIELDS || uri_len < 0 || (size_t)uri_len >= sizeof uri) {
        free(check);
        return NULL;
    }
    *check = (xProxyAuthCheck){.auth = auth, .done = done, .arg = arg};
    memcpy(all, fields, n * sizeof *fields);
    xStr method = xHttpRequestMethod(req), original = {uri, (size_t)uri_len};
    all[n++] = (xHttpClientField){xStrFromC("X-Original-Method"), method};
    all[n++] = (xHttpClientField){xStrFromC("X-Original-URI"), original};
    xHttpClientRequestOpts o;
    xHttpClientRequestOptsInit(&o);
    o.method = auth->method ? xStrFromC(auth->method) : method;
    o.target = auth->target ? xStrFromC(auth->target) : original;
    o.fields = all;
    o.num_fields = n;
    o.body_length = 0;
    o.handlers = &auth_handlers;
    o.arg = check;
    if (xHttpClientStart(client, auth->upstream, &o, &check->up) != XOK) {
        free(check);
        return NULL;
    }
    return check;
}

void xProxyAuthCancel(xProxyAuthCheck *check) {
    if (!check) return;
    xHttpClientRequestCancel(check->up);
    free(check);
}
