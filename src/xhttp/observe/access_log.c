/* access_log.c — one worker's buffered access log, and the fields a
 * handler adds to its request's line. */
#include "xhttp/observe/access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <xbase/log.h>
#include <xhttp/tls.h>

#include "xnet/address.h"
#include "xhttp/core/tokens.h"

static int open_path(const char *path) { return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644); }

/* Writes every waiting line; what cannot be written is dropped (a full disk
 * must not grow the buffer without bound), and said once. */
static void flush(xAccessLog *log) {
    xTimerStop(log->loop, &log->timer);
    size_t done = 0;
    while (done < log->lines.len) {
        ssize_t n = write(log->fd, log->lines.data + done, log->lines.len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (!log->failed)
                XLOG_ERROR("access log: lines lost: %s", n < 0 ? strerror(errno) : "short write");
            log->failed = true;
            break;
        }
        done += (size_t)n;
    }
    log->lines.len = 0;
}

static void on_timer(xEventLoop *loop, xTimer *timer, void *arg) { flush(arg); }

xErrno xAccessLogOpen(xAccessLog *log, xEventLoop *loop, const xHttpAccessLogOpts *opts) {
    memset(log, 0, sizeof *log);
    log->loop = loop;
    log->opts = opts;
    log->clock.second = -1;
    log->fd = opts->path ? open_path(opts->path) : opts->fd;
    xTimerInit(&log->timer, on_timer, log);
    return log->fd >= 0 ? XOK : XERR_SYS;
}

/* A header's value, or an absent view. */
static xStr header(const xHttpRequest *req, const char *name) {
    xStr value = {NULL, 0};
    xHttpRequestHeader(req, name, &value);
    return value;
}

/* A line carries at most this many bytes of the handler's fields. */
#define XACCESS_FIELDS_MAX 4096

xErrno xHttpResponseLogField(xHttpResponse *res, const char *key, const char *value) {
    xHttpExchange *ex = xHttpExchangeOfResponse(res);
    if (res->finished) return XERR_STATE;
    if (!key || !value || !xAccessFieldKeyAllowed(key)) return XERR_INVALID;
    size_t key_len = strlen(key), value_len = strlen(value);
    for (xAccessField f = {.rest = {ex->log_fields.data, ex->log_fields.len}}; xAccessNextField(&f);)
        if (xStrEqualsC(f.key, key)) return XERR_INVALID;
    if (ex->log_fields.len + key_len + value_len + 2 > XACCESS_FIELDS_MAX) return XERR_LIMIT;
    xErrno err = xBufferReserve(&ex->log_fields, key_len + value_len + 2);
    if (err != XOK) return err;
    xBufferAppend(&ex->log_fields, key, key_len + 1);
    xBufferAppend(&ex->log_fields, value, value_len + 1);
    return XOK;
}

void xAccessLogFinished(xAccessLog *log, const xHttpExchange *ex, int status, uint64_t body_len,
                        uint64_t duration_us) {
    const xHttpRequest *req = &ex->req;
    char address[XNET_ADDR_TEXT] = "";
    xTlsInfo tls = {.struct_size = sizeof tls};
    bool secure = xConnTlsInfo(req->conn, &tls);
    xNetAddr client;
    xHttpRequestClient(req, &client);
    xNetAddrFormat(&client, address, sizeof address);
    const xHttpSessionStats *session = ex->res.session;
    /* A session's bytes are its frames, whatever its status says of a body. */
    bool has_body = session || (xHttpStatusHasBody(status) && !xStrEqualsC(req->method, "HEAD"));
    xAccessRecord rec = {
        .address = xStrFromC(address),
        .port = client.port,
        .method = req->method,
        .path = req->path,
        .query = req->query,
        .protocol = xStrFromC(req->protocol ? req->protocol : "HTTP/2"),
        .status = status,
        .bytes = has_body ? body_len : 0,
        .duration_us = duration_us,
        .referer = header(req, "referer"),
        .user_agent = header(req, "user-agent"),
        .tls = secure && tls.version ? xStrFromC(tls.version) : (xStr){NULL, 0},
        .fields = {ex->log_fields.data, ex->log_fields.len},
    };
    if (session) {
        rec.session = true;
        rec.messages_in = session->messages_in;
        rec.messages_out = session->messages_out;
        rec.bytes_in = session->bytes_in;
        rec.bytes_out = session->bytes_out;
    }
    xAccessClockSet(&log->clock, xEventLoopWallSeconds(log->loop));
    if (xAccessFormat(&log->lines, log->opts->format, &log->clock, &rec) != XOK) return;
    if (log->lines.len >= log->opts->buffer_size)
        flush(log);
    else if (!xTimerActive(&log->timer))
        xTimerStart(log->loop, &log->timer, log->opts->flush_ms);
}

void xAccessLogReopen(xAccessLog *log) {
    if (!log->opts || !log->opts->path) return;
    flush(log);
    int fd = open_path(log->opts->path);
    if (fd < 0) {
        XLOG_ERROR("access log: cannot reopen %s, writing on to the old file: %s", log->opts->path,
                   strerror(errno));
        return;
    }
    close(log->fd);
    log->fd = fd;
    log->failed = false;
}

void xAccessLogClose(xAccessLog *log) {
    if (!log->opts) return;
    if (log->fd >= 0) flush(log);
    if (log->opts->path && log->fd >= 0) close(log->fd);
    xBufferFree(&log->lines);
    log->opts = NULL;
}
