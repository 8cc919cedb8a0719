/* floor_response.h — what the least-work responders (baseline_responder.c, baseline_uring.c) answer
 * every request with: the bytes of xKit's own /ping answer, field for field and byte for byte in
 * length (a status line, Server, a Date kept to the second, Content-Type, Content-Length, "pong").
 *
 * Pipelined, the load generator is the bottleneck, and what it spends per response grows with the
 * response: against a shorter canned answer (75 bytes, as the floor had until 2026-11-25) wrk
 * completes 15% more requests a second whatever the server does. With the same bytes, requests a
 * second compare the servers, and what xKit costs beyond the floor is its work, not its bytes. */
#ifndef BENCH_FLOOR_RESPONSE_H
#define BENCH_FLOOR_RESPONSE_H

#include <string.h>
#include <time.h>

static char floor_response[] = "HTTP/1.1 200 OK\r\nServer: base\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\n"
                               "Content-Type: text/plain\r\nContent-Length: 4\r\n\r\npong";
#define FLOOR_RESPONSE_LEN (sizeof floor_response - 1)
#define FLOOR_DATE_AT (sizeof "HTTP/1.1 200 OK\r\nServer: base\r\nDate: " - 1)
#define FLOOR_DATE_LEN (sizeof "Thu, 01 Jan 1970 00:00:00 GMT" - 1)

/* Writes the current second's IMF-fixdate (RFC 9110 §5.6.7) into response, a copy of
 * floor_response, when the second is not *shown; returns whether it did. */
static int floor_date_refresh(char *response, time_t *shown) {
    time_t now = time(NULL);
    if (now == *shown) return 0;
    char date[FLOOR_DATE_LEN + 1];
    struct tm tm;
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));
    memcpy(response + FLOOR_DATE_AT, date, FLOOR_DATE_LEN);
    *shown = now;
    return 1;
}

#endif
