/* fuzz_pg_replies.c — the PostgreSQL pool's reply parsing (src/xdb/pg.c)
 * against a hostile or broken server: an xPgPool of one connection on a
 * loop of its own connects (through libpq) to a loopback port the harness
 * listens on; the harness answers libpq's startup itself (AuthenticationOk,
 * ParameterStatus, BackendKeyData, ReadyForQuery), the pool sends its
 * queries, and the harness answers them with the input's bytes. The parser
 * needs the pool's connection and queries around it, so the real path is
 * driven rather than a function fed bytes.
 *
 * Byte 0: bits 0-1, what is in flight: one row query (item_by_id); a batch
 * of four (item_by_id, items_by_price, update_item, fortunes: rows, rows, no
 * rows, no parameters); a transaction (BEGIN, then from its callback a row
 * query, an update and COMMIT); two batches (a row query, then a turn
 * later two more); bits 2-3, the pieces the rest is written in (1, 7, 64
 * bytes, or at once), each followed by a turn of the loop; bit 4, the first
 * query (or the BEGIN) is cancelled by its owner right after it is sent.
 * Then the server's socket is closed. Checked:
 *   - every query not cancelled ends exactly once, never after; a cancelled
 *     one never calls back; an outcome is rows (XPG_OK), a server error with
 *     a five-character SQLSTATE (or the pool's "not run" for a query skipped
 *     in a failed transaction), or XPG_EDOWN;
 *   - an OK result: every row has the result's column count; where the
 *     input describes every statement alike (its RowDescriptions, NoData as
 *     0), a result with rows has that count; each value read through the
 *     getters is NUL-terminated at its length and is bytes the server sent,
 *     NULL reads as "", and the typed getters say what pg_text's readers say
 *     of the text; outside the result the getters give NULL, "" and false;
 *   - no allocation (one block) while answering is larger than 256 KiB plus
 *     8 bytes per input byte: a length the server states is not memory it
 *     gets (under ASan, through its allocator's hooks);
 *   - the connection is closed by the pool when the input breaks the
 *     framing (a length under 4 or past the bound for its type, an unknown
 *     type) and whenever a query failed with XPG_EDOWN while the server was
 *     still there;
 *   - once the server is gone, within FUZZ_PEER_SETTLE_TURNS turns every query
 *     has ended and the pool holds no connection, no query in flight and
 *     none queued.
 * ASan and UBSan catch the rest (reads past a message, use after free). */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xdb/pg.h>

#include "fuzz_check.h"
#include "fuzz_peer.h"
#include "xdb/pg_text.h"

#define MAX_CALLS 8
#define ALLOC_BOUND(size) (256u * 1024u + 8u * (size))

static uint32_t get_u32(const uint8_t *at) {
    return (uint32_t)at[0] << 24 | (uint32_t)at[1] << 16 | (uint32_t)at[2] << 8 | at[3];
}

/* ---- Allocations, seen through the sanitizer allocator's hooks ---- */

int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *)) __attribute__((weak));

static bool counting;
static size_t largest_alloc;

static void on_malloc(const volatile void *ptr, size_t size) {
    (void)ptr;
    if (counting && size > largest_alloc) largest_alloc = size;
}

static void on_free(const volatile void *ptr) { (void)ptr; }

/* ---- The queries and their callbacks ---- */

typedef enum CallState { CALL_UNUSED, CALL_WAITING, CALL_CANCELLED, CALL_ENDED } CallState;

typedef struct Call {
    CallState state;
    xPgStatus status;
    int stmt; /* -1: BEGIN, COMMIT */
    xPgQuery *handle;
} Call;

enum { STMT_ITEM, STMT_PRICE, STMT_UPDATE, STMT_FORTUNES };

static xEventLoop *loop;
static int listener = -1;
static uint16_t port;
static Call calls[MAX_CALLS];
static int ncalls;
static const uint8_t *input; /* the server's bytes, for values to be found in */
static size_t input_len;
static int described_columns; /* the input's one column count for every statement, or -1 */
static bool server_there;     /* EDOWN now means the pool broke the connection itself */
static bool edown_while_there;

static Call *new_call(int stmt) {
    FUZZ_ASSERT(ncalls < MAX_CALLS, "too many calls");
    Call *c = &calls[ncalls++];
    *c = (Call){.state = CALL_WAITING, .stmt = stmt};
    return c;
}

static bool is_sqlstate(const char *s) {
    if (strlen(s) != 5) return false;
    for (int i = 0; i < 5; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'A' && s[i] <= 'Z'))) return false;
    return true;
}

static void check_values(const xPgResult *r, const Call *c) {
    int rows = xPgRows(r), cols = xPgColumns(r);
    FUZZ_ASSERT(rows >= 0 && cols >= 0 && cols <= 65535, "%d rows of %d columns", rows, cols);
    if (rows > 0 && c->stmt >= 0 && described_columns >= 0)
        FUZZ_ASSERT(cols == described_columns, "rows of %d columns, described as %d", cols,
                    described_columns);
    for (int row = 0; row < rows; row++) {
        for (int col = 0; col < cols; col++) {
            size_t n = 99;
            const char *text = xPgGetText(r, row, col, &n);
            FUZZ_ASSERT(text != NULL, "no text");
            int64_t i, want_i = 0;
            double d, want_d = 0;
            bool b, want_b = false;
            bool gi = xPgGetInt64(r, row, col, &i), gd = xPgGetDouble(r, row, col, &d),
                 gb = xPgGetBool(r, row, col, &b);
            if (xPgIsNull(r, row, col)) {
                FUZZ_ASSERT(n == 0 && text[0] == 0, "a NULL read as %zu bytes", n);
                FUZZ_ASSERT(!gi && !gd && !gb, "a NULL read as a number or boolean");
                continue;
            }
            FUZZ_ASSERT(n <= input_len, "a %zu-byte value from %zu bytes", n, input_len);
            FUZZ_ASSERT(text[n] == 0, "a value not NUL-terminated at its length");
            FUZZ_ASSERT(n == 0 || memmem(input, input_len, text, n) != NULL,
                        "a %zu-byte value the server never sent", n);
            bool wi = xPgParseInt64(text, n, &want_i), wd = xPgParseDouble(text, n, &want_d),
                 wb = xPgParseBool(text, n, &want_b);
            FUZZ_ASSERT(gi == wi && (!gi || i == want_i), "xPgGetInt64 disagrees with its text");
            FUZZ_ASSERT(gd == wd && (!gd || memcmp(&d, &want_d, sizeof d) == 0), "xPgGetDouble disagrees");
            FUZZ_ASSERT(gb == wb && (!gb || b == want_b), "xPgGetBool disagrees");
        }
    }
    size_t n = 1;
    FUZZ_ASSERT(xPgIsNull(r, rows, 0) && xPgIsNull(r, 0, cols) && xPgIsNull(r, -1, 0), "a value outside");
    FUZZ_ASSERT(*xPgGetText(r, rows, 0, &n) == 0 && n == 0, "text outside the result");
    int64_t i;
    FUZZ_ASSERT(!xPgGetInt64(r, 0, -1, &i) && i == 0, "an integer outside the result");
}

static void end_call(Call *c, const xPgResult *r) {
    FUZZ_ASSERT(c->state != CALL_CANCELLED, "a cancelled query called back");
    FUZZ_ASSERT(c->state == CALL_WAITING, "a query ended twice (state %d)", c->state);
    c->state = CALL_ENDED;
    c->status = xPgResultStatus(r);
    const char *state = xPgResultSqlState(r), *message = xPgResultMessage(r);
    FUZZ_ASSERT(state && message, "no SQLSTATE or message");
    switch (c->status) {
    case XPG_OK:
        FUZZ_ASSERT(*state == 0, "an OK result with SQLSTATE %s", state);
        check_values(r, c);
        break;
    case XPG_ESERVER:
        FUZZ_ASSERT(is_sqlstate(state) || (*state == 0 && strncmp(message, "not run: ", 9) == 0),
                    "a server error with SQLSTATE \"%s\" (%s)", state, message);
        FUZZ_ASSERT(xPgRows(r) == 0 && xPgColumns(r) == 0, "a failure with rows");
        break;
    case XPG_EDOWN:
        FUZZ_ASSERT(*state == 0 && *message, "XPG_EDOWN with SQLSTATE \"%s\" or no reason", state);
        if (server_there) edown_while_there = true;
        break;
    default: FUZZ_ASSERT(false, "status %s", xPgStatusName(c->status));
    }
}

static void on_result(const xPgResult *r, void *arg) { end_call(arg, r); }

static void on_begin(xPgTx *tx, const xPgResult *r, void *arg) {
    Call *c = arg;
    FUZZ_ASSERT((tx != NULL) == (xPgResultStatus(r) == XPG_OK), "a transaction with status %s",
                xPgStatusName(xPgResultStatus(r)));
    end_call(c, r);
    if (!tx) return;
    static const xPgParam item[] = {{.kind = XPG_INT, .integer = 7}};
    static const xPgParam update[] = {{.kind = XPG_INT, .integer = 7},
                                      {.kind = XPG_TEXT, .text = "renamed", .length = 7},
                                      {.kind = XPG_INT, .integer = 120},
                                      {.kind = XPG_INT, .integer = 3}};
    Call *q = new_call(STMT_ITEM);
    if (xPgTxQuery(tx, STMT_ITEM, item, 1, 0, on_result, q, NULL) != XPG_OK) q->state = CALL_UNUSED;
    q = new_call(STMT_UPDATE);
    if (xPgTxQuery(tx, STMT_UPDATE, update, 4, 0, on_result, q, NULL) != XPG_OK) q->state = CALL_UNUSED;
    q = new_call(-1);
    if (xPgTxCommit(tx, on_result, q) != XPG_OK) q->state = CALL_UNUSED;
}

static void send_query(xPgPool *pool, int stmt) {
    static const xPgParam item[] = {{.kind = XPG_INT, .integer = 42}};
    static const xPgParam price[] = {
        {.kind = XPG_INT, .integer = 10}, {.kind = XPG_INT, .integer = 50}, {.kind = XPG_INT, .integer = 3}};
    static const xPgParam update[] = {{.kind = XPG_INT, .integer = 7},
                                      {.kind = XPG_TEXT, .text = "renamed", .length = 7},
                                      {.kind = XPG_INT, .integer = 120},
                                      {.kind = XPG_INT, .integer = 3}};
    static const struct {
        const xPgParam *params;
        int n;
    } args[] = {[STMT_ITEM] = {item, 1},
                [STMT_PRICE] = {price, 3},
                [STMT_UPDATE] = {update, 4},
                [STMT_FORTUNES] = {NULL, 0}};
    Call *c = new_call(stmt);
    xPgStatus s = xPgQuerySend(pool, stmt, args[stmt].params, args[stmt].n, 0, on_result, c, &c->handle);
    FUZZ_ASSERT(s == XPG_OK, "a query not sent: %s", xPgStatusName(s));
}

/* ---- Set-up, once ---- */

static void set_up(void) {
    loop = xEventLoopCreate();
    FUZZ_ASSERT(loop != NULL, "no loop");
    listener = fuzzPeerListen(&port);
    if (__sanitizer_install_malloc_and_free_hooks)
        __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}

/* ---- The server's end ---- */

static void put_message(uint8_t **at, char type, const char *body, size_t len) {
    *(*at)++ = (uint8_t)type;
    uint32_t n = htonl((uint32_t)(len + 4));
    memcpy(*at, &n, 4);
    memcpy(*at + 4, body, len);
    *at += 4 + len;
}

/* libpq's startup packet, then the server's welcome: trust, a few parameters, idle. */
static void answer_startup(FuzzPeer *p) {
    for (int t = 0; t < FUZZ_PEER_SETTLE_TURNS && (p->len < 4 || p->len < get_u32(p->out)); t++)
        fuzzPeerTurn(p);
    FUZZ_ASSERT(p->len >= 8 && p->len == get_u32(p->out), "no startup packet (%zu bytes)", p->len);
    FUZZ_ASSERT(get_u32(p->out + 4) == 196608, "not protocol 3.0");
    uint8_t hello[256], *at = hello;
    put_message(&at, 'R', "\0\0\0\0", 4);
    put_message(&at, 'S', "server_version\00015.0", 20);
    put_message(&at, 'S', "client_encoding\0UTF8", 21);
    put_message(&at, 'S', "standard_conforming_strings\0on", 31);
    put_message(&at, 'K', "\0\0\0\1\0\0\0\2", 8);
    put_message(&at, 'Z', "I", 1);
    fuzzPeerWrite(p, hello, (size_t)(at - hello));
    p->len = 0;
}

/* The framing of the input as the pool must judge it: true when some message
 * is malformed by its head alone or of a type no server sends the pool;
 * *columns gets the one count every RowDescription (and NoData, 0) gives, or -1. */
static bool framing_broken(const uint8_t *in, size_t len, int *columns) {
    *columns = -2;
    for (size_t at = 0; len - at >= 5;) {
        uint8_t type = in[at];
        uint32_t n = get_u32(in + at + 1);
        bool may_be_long = type && strchr("DTENA", type);
        if (n < 4 || n > (may_be_long ? 0x7fffffffu : 30000u)) return true;
        if (len - at - 1 < n) return false;
        if (!type || !strchr("D2CI1tTnEZNSAK", type)) return true;
        if (type == 'T' || type == 'n') {
            int c = type == 'n' ? 0 : n >= 6 ? (int)(in[at + 5] << 8 | in[at + 6]) : -1;
            *columns = *columns == -2 || *columns == c ? c : -1;
        }
        at += 1 + n;
    }
    return false;
}

/* ---- One input ---- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        set_up();
        ready = true;
    }
    if (size < 1) return 0;
    unsigned mode = data[0], scenario = mode & 3;
    static const size_t pieces[] = {1, 7, 64, SIZE_MAX};
    size_t piece = pieces[(mode >> 2) & 3];
    bool cancel = mode & 16;
    input_len = size - 1;
    uint8_t *in = (uint8_t *)fuzz_copy(data + 1, input_len);
    input = in;
    bool broken = framing_broken(in, input_len, &described_columns);
    if (described_columns == -2) described_columns = -1;

    char conninfo[160];
    snprintf(conninfo, sizeof conninfo,
             "hostaddr=127.0.0.1 port=%d user=fuzz dbname=fuzz sslmode=disable gssencmode=disable", port);
    xPgConf conf;
    xPgConfInit(&conf);
    conf.conninfo = conninfo;
    conf.connections = 1;
    /* No timer may fire within one input: what ends it is the server's close. */
    conf.query_timeout_ms = conf.connect_timeout_ms = 600000;
    conf.backoff_min_ms = conf.backoff_max_ms = 600000;
    xPgPool *pool = xPgPoolCreate(loop, &conf);
    FUZZ_ASSERT(pool != NULL, "no pool");
    FUZZ_ASSERT(xPgPoolPrepare(pool, "item_by_id",
                               "SELECT id, name, category, price, quantity, active, tags, rating_score, "
                               "rating_count FROM items WHERE id = $1",
                               1, NULL) == STMT_ITEM &&
                    xPgPoolPrepare(pool, "items_by_price",
                                   "SELECT id, name, category, price, quantity, active, tags, rating_score, "
                                   "rating_count FROM items WHERE price BETWEEN $1 AND $2 LIMIT $3",
                                   3, NULL) == STMT_PRICE &&
                    xPgPoolPrepare(pool, "update_item",
                                   "UPDATE items SET name = $2, price = $3, quantity = $4 WHERE id = $1", 4,
                                   NULL) == STMT_UPDATE &&
                    xPgPoolPrepare(pool, "fortunes", "SELECT id, message FROM fortune", 0, NULL) ==
                        STMT_FORTUNES,
                "statements not prepared");

    /* Each piece leaves at once: Nagle would hold it for the pool's delayed ACK, past the turns. */
    FuzzPeer p = {.loop = loop, .listener = listener, .fd = -1, .nodelay = true, .stop_writing_at_eof = true};
    fuzzPeerAccept(&p, "the pool");
    answer_startup(&p);
    xPgStats stats;
    for (int t = 0; t < FUZZ_PEER_SETTLE_TURNS; t++) {
        xPgPoolStats(pool, &stats);
        if (stats.connections_ready == 1) break;
        fuzzPeerTurn(&p);
    }
    FUZZ_ASSERT(stats.connections_ready == 1, "the pool's connection never came up");

    memset(calls, 0, sizeof calls);
    ncalls = 0;
    server_there = true;
    edown_while_there = false;
    largest_alloc = 0;
    counting = true;
    switch (scenario) {
    case 0: send_query(pool, STMT_ITEM); break;
    case 1:
        send_query(pool, STMT_ITEM);
        send_query(pool, STMT_PRICE);
        send_query(pool, STMT_UPDATE);
        send_query(pool, STMT_FORTUNES);
        break;
    case 2: {
        Call *c = new_call(-1);
        FUZZ_ASSERT(xPgTxBegin(pool, on_begin, c, &c->handle) == XPG_OK, "BEGIN not sent");
        break;
    }
    default:
        send_query(pool, STMT_ITEM);
        fuzzPeerTurn(&p);
        send_query(pool, STMT_PRICE);
        send_query(pool, STMT_FORTUNES);
        break;
    }
    if (cancel) {
        xPgQueryCancel(calls[0].handle);
        calls[0].state = CALL_CANCELLED;
    }
    fuzzPeerTurn(&p);

    fuzzPeerWritePieces(&p, in, input_len, piece);
    for (int t = 0; t < 8; t++) fuzzPeerTurn(&p);
    counting = false;
    FUZZ_ASSERT(largest_alloc <= ALLOC_BOUND(input_len), "a %zu-byte allocation for %zu bytes of input",
                largest_alloc, input_len);
    if (broken || edown_while_there) {
        for (int t = 0; t < FUZZ_PEER_SETTLE_TURNS && !p.eof; t++) fuzzPeerTurn(&p);
        FUZZ_ASSERT(p.eof, "the connection left open after %s",
                    broken ? "a malformed message" : "failing its queries");
    }

    /* The server goes: everything ends, and nothing stays open. */
    server_there = false;
    fuzzPeerClose(&p);
    bool over = false;
    for (int t = 0; t < FUZZ_PEER_SETTLE_TURNS && !over; t++) {
        fuzzPeerTurn(&p);
        xPgPoolStats(pool, &stats);
        over = stats.connections_ready == 0 && stats.in_flight == 0 && stats.queued == 0;
        for (int i = 0; i < ncalls; i++) over = over && calls[i].state != CALL_WAITING;
    }
    for (int i = 0; i < ncalls; i++) FUZZ_ASSERT(calls[i].state != CALL_WAITING, "query %d never ended", i);
    FUZZ_ASSERT(stats.connections_ready == 0 && stats.in_flight == 0 && stats.queued == 0,
                "%d connections up, %d queries in flight, %d queued after the server left",
                stats.connections_ready, stats.in_flight, stats.queued);
    xPgPoolFree(pool);
    fuzzPeerFree(&p);
    free(in);
    return 0;
}
