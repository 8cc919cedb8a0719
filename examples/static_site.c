/* static_site — a directory served as a small production site is: over HTTPS,
 * HTTP/2 and HTTP/1.1 on one port (ALPN picks per connection), text
 * compressed for the clients that take it, security headers on every answer,
 * and a plain HTTP port that only redirects to HTTPS.
 *
 *   static_site ROOT CERT KEY [HTTPS_PORT [HTTP_PORT [WORKERS]]]   (8443, 8080; WORKERS 0 is one per CPU)
 *   static_site build/examples/site cert.pem key.pem
 *   curl --http2 --compressed --cacert cert.pem https://localhost:8443/
 *
 * A certificate to try it with:
 *   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
 *       -subj /CN=localhost -addext subjectAltName=DNS:localhost -keyout key.pem -out cert.pem
 * A renewed certificate is taken up without a restart: replace the files, then kill -HUP.
 *
 * Compression: a file's twin made ahead of time (style.css.gz beside
 * style.css, as `make` makes for the example site; `gzip -k -9`, `brotli -k`)
 * goes to a client that takes its coding; a text file without one is
 * compressed on the fly once per worker and kept. Both say Vary:
 * Accept-Encoding, so caches keep each coding apart. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xkit.h>

typedef struct Site {
    xHttpStatic *files;
    uint16_t https_port; /* where the plain port's redirects point */
} Site;

/* The host the client asked for, without its port, or an empty view when the
 * Host field is missing or holds more than a host name or address may. */
static xStr requested_host(const xHttpRequest *req) {
    xStr host;
    if (!xHttpRequestHeader(req, "Host", &host)) return (xStr){"", 0}; /* HTTP/2's :authority too */
    size_t len = 0;
    if (host.len && host.data[0] == '[') { /* an IPv6 literal keeps its brackets */
        while (len < host.len && host.data[len] != ']') len++;
        len = len < host.len ? len + 1 : 0;
    } else {
        while (len < host.len && host.data[len] != ':') len++;
    }
    for (size_t i = 0; i < len; i++) {
        char c = host.data[i];
        if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') &&
            !strchr(".-[]:", c))
            return (xStr){"", 0};
    }
    return (xStr){host.data, len};
}

/* 301 to the same path and query over HTTPS: permanent, so browsers and
 * search engines remember the secure address. It goes to the host the client
 * named; a site with one name would send every client to that name instead. */
static void redirect_to_https(xHttpRequest *req, xHttpResponse *res, uint16_t https_port) {
    xStr host = requested_host(req), path = xHttpRequestPath(req), query = xHttpRequestQuery(req);
    char port[8] = "", location[10240];
    if (https_port != 443) snprintf(port, sizeof port, ":%u", https_port);
    int n = snprintf(location, sizeof location, "https://%.*s%s%.*s%s%.*s", (int)host.len, host.data, port,
                     (int)path.len, path.data, query.len ? "?" : "", (int)query.len, query.data);
    if (host.len == 0 || n >= (int)sizeof location ||
        xHttpResponseAddHeader(res, "Location", location) != XOK) {
        xHttpResponseSetStatus(res, 400);
        xHttpResponseSend(res, NULL, 0);
        return;
    }
    static const char moved[] = "Moved to HTTPS.\n";
    xHttpResponseSetStatus(res, 301);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseSend(res, moved, sizeof moved - 1);
}

static void on_request(xHttpRequest *req, xHttpResponse *res, void *arg) {
    Site *site = arg;
    if (strcmp(xHttpRequestScheme(req), "https") != 0) {
        redirect_to_https(req, res, site->https_port);
        return;
    }
    /* HSTS: for a year, browsers go straight to HTTPS for this host, on any
     * port (so on localhost:8080 too, while trying this; real sites use 80 and
     * 443). Only honoured over HTTPS, so the plain port does not send it. */
    xHttpResponseAddHeader(res, "Strict-Transport-Security", "max-age=31536000");
    /* Types as sent, not guessed; scripts, styles and images only from this
     * site, no inline script; no framing by other sites (clickjacking). */
    xHttpResponseAddHeader(res, "X-Content-Type-Options", "nosniff");
    xHttpResponseAddHeader(res, "Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'");
    xHttpResponseAddHeader(res, "Referrer-Policy", "strict-origin-when-cross-origin");
    xHttpStaticHandler(req, res, site->files);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s ROOT CERT KEY [HTTPS_PORT [HTTP_PORT [WORKERS]]]\n", argv[0]);
        return 2;
    }
    long port = argc > 4 ? strtol(argv[4], NULL, 10) : 8443,
         http_port = argc > 5 ? strtol(argv[5], NULL, 10) : 8080;
    xHttpStaticConf files_conf;
    xHttpStaticConfInit(&files_conf); /* index.html for "/", .br/.gz twins preferred */
    files_conf.root = argv[1];
    /* Every use revalidates: a deploy shows at once, and an unchanged file
     * costs a 304 answered from its ETag. Assets with versioned names could
     * be cached for a year instead ("max-age=31536000, immutable"). */
    files_conf.cache_control = "no-cache";
    Site site = {0};
    xErrno err = xHttpStaticCreate(&files_conf, &site.files);
    if (err != XOK) {
        fprintf(stderr, "cannot serve %s: %s\n", argv[1],
                err == XERR_SYS ? strerror(errno) : xErrnoString(err));
        return 1;
    }
    xHttpServerConf conf;
    xHttpServerConfInit(&conf);
    conf.workers = argc > 6 ? atoi(argv[6]) : 0;
    xHttpServer *server = xHttpServerCreate(NULL, &conf);
    if (!server) return 1;
    xHttpServerRoute(server, "GET /*", on_request, &site);
    xHttpServerCompress(server, NULL); /* gzip and Brotli for text types, by Accept-Encoding */
    static const char not_found[] = "<!doctype html><title>Not found</title><h1>Not found</h1>\n";
    xHttpServerErrorBody(server, 404, "text/html; charset=utf-8", not_found, sizeof not_found - 1);

    xTlsConf tls;
    xTlsConfInit(&tls); /* ALPN "h2,http/1.1", TLS 1.2 and 1.3, AEAD suites only */
    tls.cert.cert_file = argv[2];
    tls.cert.key_file = argv[3];
    if (xHttpServerListenTls(server, NULL, (uint16_t)port, &tls) != XOK ||
        xHttpServerListen(server, NULL, (uint16_t)http_port) != XOK) {
        fprintf(stderr, "listen: %s\n", xHttpServerLastError(server));
        return 1;
    }
    site.https_port = xHttpServerListenerPort(server, 0);
    printf("listening on 0.0.0.0:%u (%d workers)\n", site.https_port, xHttpServerWorkerCount(server));
    printf("plain listening on 0.0.0.0:%u\n", xHttpServerListenerPort(server, 1));
    fflush(stdout);
    err = xHttpServerRun(server); /* until SIGINT or SIGTERM; SIGHUP reloads the certificate */
    xHttpServerDestroy(server);
    xHttpStaticDestroy(site.files);
    return err == XOK ? 0 : 1;
}
