/* access_format.h — one access log line from one request's facts, in the
 * common, combined or JSON format, escaped so that no client can forge a
 * field or a line. Pure formatting: no I/O, no server state. */
#ifndef XHTTP_OBSERVE_ACCESS_FORMAT_H
#define XHTTP_OBSERVE_ACCESS_FORMAT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <xbase/buffer.h>
#include <xbase/errno.h>
#include <xbase/str.h>
#include <xhttp/observe.h>

/** What a line says of a request. Strings are views; an absent one (no
 *  referer, no user agent, no TLS) has data NULL. */
typedef struct xAccessRecord {
    xStr address;  /* the client's, as text */
    uint16_t port; /* the client's */
    xStr method;
    xStr path;
    xStr query; /* without '?'; len 0: none */
    xStr protocol;
    int status;
    uint64_t bytes; /* body bytes sent */
    uint64_t duration_us;
    xStr referer;
    xStr user_agent;
    xStr tls; /* the TLS version */
    /* A WebSocket session's traffic, for the line written when it ends
     * (JSON only: the common formats keep their fields). */
    bool session;
    uint64_t messages_in, messages_out, bytes_in, bytes_out;
    /* The handler's own fields, "key\0value\0" pairs (len 0: none); keys
     * are checked by xAccessFieldKeyAllowed, values escaped as a client's. */
    xStr fields;
} xAccessRecord;

/** Walks "key\0value\0" fields: set rest, then each xAccessNextField
 *  gives the next key and value, false after the last. */
typedef struct xAccessField {
    xStr rest;
    xStr key, value;
} xAccessField;

bool xAccessNextField(xAccessField *f);

/** True for a key a handler may give its own field: 1 to 64 of
 *  [A-Za-z0-9_.-], none of the JSON format's own names. */
bool xAccessFieldKeyAllowed(const char *key);

/** The time a line carries, formatted once a second: the common formats'
 *  "[24/Nov/2026:13:55:36 +0100]" and JSON's RFC 3339 "2026-11-24T13:55:36+01:00"
 *  (local time). */
typedef struct xAccessClock {
    time_t second; /* the second the strings show; -1: none yet */
    char clf[96];  /* room for any int snprintf could write */
    char iso[96];
} xAccessClock;

/** Sets clock to second, unless it shows it already. */
void xAccessClockSet(xAccessClock *clock, time_t second);

/** Appends rec as one line (ending in '\n') in format to out, with the
 *  time clock shows. XERR_NOMEM: out is unchanged. */
xErrno xAccessFormat(xBuffer *out, xHttpLogFormat format, const xAccessClock *clock,
                     const xAccessRecord *rec);

#endif
