/* server.c — workers, listeners, accepting, and the graceful stop.
 *
 * Each worker owns a loop, a context and one SO_REUSEPORT socket per
 * listening address, so the kernel spreads new connections (and, on TLS
 * listeners, their handshakes) over workers, and nothing on the request path
 * is shared but the read-only routes. */
#define _GNU_SOURCE
#include <xhttp/observe.h>
#include <xhttp/compress.h>
#include <xhttp/server.h>
#include <xhttp/tls.h>
#include <xhttp/websocket.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <xbase/log.h>

#include "xbase/loop/loop_internal.h"
#include "xbase/loop/work_pool.h"
#include "xbase/mem/sized.h"

#include "xnet/connection.h"
#include "xnet/listener.h"
#include "xnet/proxy.h"
#include "xnet/quic/quic.h"
#include "xnet/quic/quic_tls.h"
#include "xnet/tls/tls.h"
#include "xhttp/core/context.h"
#include "xhttp/core/exchange.h"
#include "xhttp/core/router.h"
#include "xhttp/core/tokens.h"
#include "xhttp/observe/access_log.h"
#include "xhttp/observe/metrics.h"
#include "xhttp/observe/observer.h"
#include "xhttp/observe/prometheus.h"
#include "xhttp/filter/compress.h"
#include "xhttp/http3/connection.h"
#include "xhttp/upgrade/upgrade.h"
#include "xhttp/websocket/websocket.h"

#define XSERVER_MAX_LISTENERS 8
#define XSERVER_BACKLOG 4096

/* Where a worker is in a stop. */
typedef enum xWorkerState {
    XWORKER_SERVING,
    XWORKER_LEAVING,  /* the stop's grace: accepting and serving, health route 503, every
                         response closing its connection, so a load balancer moves off first */
    XWORKER_DRAINING, /* listeners closed, connections finishing their requests */
    XWORKER_CLOSING,  /* past the deadline: connections closed, blocking work coming back */
    XWORKER_DRAINED,  /* its part done; with HTTP/3 its loop goes on until every worker's is,
                         its UDP sockets refusing new connections (see worker_finish) */
} xWorkerState;

typedef struct xWorker {
    xHttpServer *server;
    xEventLoop *loop;
    xHttpContext ctx;
    int listen_fds[XSERVER_MAX_LISTENERS];
    int stop_fd;     /* eventfd: xHttpServerStop writes, the loop reacts */
    int spare_fd;    /* held in reserve to shed connections at EMFILE */
    xTimer deadline; /* graceful stop gives up here */
    xTimer grace;    /* the stop's grace period ends here: listeners close */
    pthread_t thread;
    xWorkerState state;
    bool stop_owed;                             /* its start hook succeeded: the stop hook is to run */
    xAccessLog log;                             /* this worker's lines, when the server logs */
    xProxyWaits proxy_waits;                    /* sockets waiting for their PROXY header */
    int quic_fds[XSERVER_MAX_LISTENERS];        /* per listener with HTTP/3: its UDP socket, until
                                                   the worker's thread makes it an endpoint */
    xQuicEndpoint *quic[XSERVER_MAX_LISTENERS]; /* per listener with HTTP/3, else NULL */
} xWorker;

/* xHttpServerRun's workers wait here until every start hook has returned, so
 * none serves when one fails. */
typedef struct xStartGate {
    pthread_mutex_t lock;
    pthread_cond_t opened;
    int waiting;    /* workers whose start has not returned yet */
    xErrno failure; /* the first failed start's, else XOK */
} xStartGate;

struct xHttpServer {
    xHttpServerConf conf;
    xRouter *router;
    xHttpRouteTarget *targets; /* what the router's routes lead to */
    xCompressConf *compress;   /* xHttpServerCompress's settings; NULL: off */
    xWorker *workers;
    int nworkers;
    int nlisteners;
    xTlsServer *tls[XSERVER_MAX_LISTENERS];    /* per listener; NULL: plain */
    xUpgradePlan plans[XSERVER_MAX_LISTENERS]; /* per listener: what its connections speak */
    xProxyTrust *proxy[XSERVER_MAX_LISTENERS]; /* per listener: who may send a PROXY header; NULL: off */
    bool bound_here[XSERVER_MAX_LISTENERS];    /* per listener: its sockets are ours alone (not inherited) */
    pthread_mutex_t closing_listeners;         /* held while a worker closes its listeners */
    uint32_t systemd_taken;                    /* the sockets systemd passed that a listener took, by index */
    xProxyTrust *forwarded; /* who may name the client in X-Forwarded-For / Forwarded; NULL: no one */
    xQuicTls *quic_tls[XSERVER_MAX_LISTENERS];         /* per listener serving HTTP/3 too; NULL: none */
    uint8_t quic_secret[32];                           /* the stateless reset tokens' key, every worker's */
    uint32_t quic_handshake_ms[XSERVER_MAX_LISTENERS]; /* per listener: its TLS handshake timeout */
    size_t quic_retry_from[XSERVER_MAX_LISTENERS]; /* per listener: handshakes under way that bring Retry */
    uint8_t quic_token_secret[32];                 /* Retry and NEW_TOKEN tokens' key, every worker's */
    char last_error[512];
    uint16_t ports[XSERVER_MAX_LISTENERS]; /* per listener, known once bound: no getsockname per accept */
    bool attached;                         /* lives on a caller's loop */
    bool running;
    bool runs_loop;         /* xHttpServerRun drives the caller's loop */
    int signal_fd;          /* attached mode: SIGINT/SIGTERM through the loop */
    int wake_fd;            /* workers mode: wakes the supervising thread; made by Create and
                               never changed, so a thread given the server may read it */
    sigset_t stop_signals;  /* SIGINT, SIGTERM (stop), SIGHUP (reload) and SIGUSR1 (reopen
                               logs), when handle_signals */
    sigset_t previous_mask; /* the creating thread's mask before Create */
    atomic_bool stop_requested;
    atomic_int workers_drained;  /* workers in XWORKER_DRAINED: at nworkers every loop stops */
    bool logging;                /* the access log is on: log_opts hold its settings */
    xHttpAccessLogOpts log_opts; /* log_opts.path is ours (strdup) */
    xMetricRegistry *metrics;    /* the application's metrics and the duration histograms */
    xHttpOwnAnswers answers;     /* what its own answers say; every worker's context reads it */
    xHttpRouteTarget not_found, not_allowed;
    xHttpWorkerStartFn worker_start; /* xHttpServerOnWorker's hooks */
    xHttpWorkerStopFn worker_stop;
    void *worker_arg;
    bool has_worker_hooks;
    xStartGate *gate;                /* xHttpServerRun's, while its workers start */
    xHttpBlockingOpts blocking_opts; /* the blocking pool's settings */
    xWorkPool *blocking;             /* the blocking pool; its threads start on demand */
};

void xHttpServerConfInitSized(xHttpServerConf *conf, size_t size) {
    xHttpServerConf defaults = {
        .workers = 0,
        .max_request_line = 8192,
        .max_header_size = 8192,
        .max_headers = 100,
        .max_body_size = 1u << 20,
        .header_timeout_ms = 10000,
        .body_timeout_ms = 30000,
        .idle_timeout_ms = 60000,
        .send_timeout_ms = 60000,
        .protocols = XHTTP_PROTO_HTTP1 | XHTTP_PROTO_HTTP2,
        .http2_max_streams = 256,
        .http2_window = 16u << 20,
        .http2_reset_burst = 1000,
        .http2_reset_rate = 33,
        .http2_max_continuations = 8,
        .http2_max_control_queue = 1000,
        .shutdown_timeout_ms = 10000,
        .max_connections = 10000,
        .handle_signals = true,
        .lingering_time_ms = XCONN_LINGER_TIME_MS,
        .lingering_timeout_ms = XCONN_LINGER_TIMEOUT_MS,
        .lingering_max_bytes = XCONN_LINGER_MAX_BYTES,
    };
    xSizedInit(conf, size, &defaults, sizeof defaults);
}

static int cpus_available(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

/* ---- Stopping ---- */

static bool serves_quic(const xWorker *w) {
    for (int i = 0; i < w->server->nlisteners; i++)
        if (w->quic[i]) return true;
    return false;
}

static bool all_workers_drained(const xHttpServer *server) {
    return atomic_load(&server->workers_drained) == server->nworkers;
}

/* The worker's connections and blocking work are done. A worker with no
 * UDP socket stops. One with HTTP/3 keeps reading its sockets until every
 * worker is done: they stay in the port's reuseport group until the server
 * exits, so the kernel still hashes new clients' Initials to them, and a
 * socket nobody reads would leave those clients waiting out their handshake
 * timeout. Read, its draining endpoint refuses them at once
 * (CONNECTION_REFUSED). Closing the sockets instead would renumber the
 * group, and the steering program, which picks a socket by its index,
 * would then send other workers' connections to the wrong socket. The last
 * worker done wakes the others to stop. */
static void worker_finish(xWorker *w) {
    if (w->ctx.worker.jobs) return;                           /* the last one back finishes */
    if (w->server->attached && !w->server->runs_loop) return; /* the caller's loop goes on */
    if (w->state == XWORKER_DRAINED) return;                  /* waiting for the others already */
    w->state = XWORKER_DRAINED;
    if (xTimerActive(&w->deadline)) xTimerStop(w->loop, &w->deadline);
    xHttpServer *server = w->server;
    if (atomic_fetch_add(&server->workers_drained, 1) + 1 == server->nworkers) {
        uint64_t one = 1;
        for (int i = 0; i < server->nworkers; i++) {
            if (&server->workers[i] == w) continue;
            ssize_t ignored = write(server->workers[i].stop_fd, &one, sizeof one);
            (void)ignored;
        }
    } else if (serves_quic(w)) {
        return;
    }
    xEventLoopStop(w->loop);
}

/* TCP connections and QUIC ones. */
static size_t open_connections(const xWorker *w) {
    size_t n = w->ctx.net.conn_count;
    for (int i = 0; i < w->server->nlisteners; i++)
        if (w->quic[i]) n += xQuicEndpointConnections(w->quic[i]);
    return n;
}

static void on_conn_gone(xNetContext *net) {
    xWorker *w = ((xHttpContext *)net)->owner;
    if (w->state >= XWORKER_DRAINING && open_connections(w) + w->proxy_waits.count == 0) worker_finish(w);
}

static void on_quic_gone(void *arg) { on_conn_gone(arg); }

/* The worker's last blocking work is back: past the deadline, nothing else
 * holds a stop up. */
static void on_jobs_done(xHttpWorker *worker) {
    xWorker *w = (xWorker *)((char *)worker - offsetof(xWorker, ctx.worker));
    if (w->state == XWORKER_CLOSING || (w->state == XWORKER_DRAINING && open_connections(w) == 0))
        worker_finish(w);
}

/* Visits every connection; fn may close (and so free) the one it is given. */
static void for_each_conn(xWorker *w, void (*fn)(xConn *)) {
    xConn *next;
    for (xConn *c = w->ctx.net.conns; c; c = next) {
        xConnRetain(c);
        fn(c);
        next = c->next;
        xConnRelease(c);
    }
}

static void drain_conn(xConn *conn) {
    /* A closed one is only held by a request whose handler still works:
     * nothing is left to say to its client; a lingering one has said all
     * (its linger is bounded, and ends before the stop's deadline or at it). */
    if (conn->proto->on_drain && !xConnClosed(conn) && !xConnLingering(conn)) conn->proto->on_drain(conn);
}

static void close_quic(xWorker *w) {
    for (int i = 0; i < XSERVER_MAX_LISTENERS; i++) {
        xQuicEndpointDestroy(w->quic[i]); /* CONNECTION_CLOSE to each of its connections */
        w->quic[i] = NULL;
        if (w->quic_fds[i] >= 0) close(w->quic_fds[i]);
        w->quic_fds[i] = -1;
    }
}

static void on_deadline(xEventLoop *loop, xTimer *timer, void *arg) {
    xWorker *w = arg;
    XLOG_WARN("shutdown deadline passed with %zu connections open; closing them", w->ctx.net.conn_count);
    w->state = XWORKER_CLOSING;
    /* Blocking work that has not begun never will (cancelled first, so none
     * begins while the connections close); what runs is waited for. */
    xWorkPoolCancel(w->server->blocking, w->loop);
    for_each_conn(w, xConnClose);
    /* Its UDP sockets stay in the reuseport group, read and refusing new
     * connections, until every worker is done (see worker_finish): closing
     * them now would renumber the group under workers still serving. The
     * other workers' deadlines fall at about the same time, so the stop is
     * still over by the deadline (and the blocking work still running). */
    for (int i = 0; i < w->server->nlisteners; i++)
        if (w->quic[i]) xQuicEndpointCloseAll(w->quic[i]);
    worker_finish(w);
}

static void on_accept(xEventLoop *loop, int listen_fd, unsigned events, void *arg);

static void close_listeners(xWorker *w) {
    for (int i = 0; i < w->server->nlisteners; i++) {
        if (w->listen_fds[i] < 0) continue;
        xEventLoopRemove(w->loop, w->listen_fds[i]);
        /* Ours stop now, not when the io_uring backend's poll on them is
         * cancelled; an inherited one goes on listening for its next holder. */
        if (w->server->bound_here[i])
            xListenerCloseOwn(w->listen_fds[i]);
        else
            close(w->listen_fds[i]);
        w->listen_fds[i] = -1;
    }
}

/* Stops accepting. What the kernel has queued on our sockets is taken first
 * and served: closed, a socket resets its queue, or (in a shared port's
 * group with the queue handed over) moves it to another copy, and a
 * connection taken here is one fewer to move. */
static void stop_accepting(xWorker *w) {
    for (int i = 0; i < w->server->nlisteners; i++)
        if (w->listen_fds[i] >= 0) on_accept(w->loop, w->listen_fds[i], XEV_READ, w);
    /* One worker's sockets close at a time: a closing socket's queue may be
     * handed to another of ours, which must still be listening to take it
     * (the kernel resets what it cannot place), and hands it on in turn.
     * Two closing at once reset some: the kernel picks a socket, which then
     * stops before the connection is queued on it (a reuseport group with
     * two sockets closing concurrently and clients connecting lost 122 of
     * 45,487 connections here; one at a time, none). */
    pthread_mutex_lock(&w->server->closing_listeners);
    close_listeners(w);
    pthread_mutex_unlock(&w->server->closing_listeners);
}

static void begin_drain(xWorker *w) {
    if (w->state >= XWORKER_DRAINING) return;
    xTimerStop(w->loop, &w->grace);
    w->ctx.draining = true;
    stop_accepting(w);
    w->state = XWORKER_DRAINING;
    /* Sockets still reading their PROXY header are a load balancer's
     * connections with a request behind the header: they are let in (their
     * header timeout still holds), and answered with Connection: close. */
    for_each_conn(w, drain_conn);
    /* QUIC's sockets stay open: its connections drain through them. */
    for (int i = 0; i < w->server->nlisteners; i++)
        if (w->quic[i]) xQuicEndpointDrain(w->quic[i]);
    if (open_connections(w) + w->proxy_waits.count == 0) {
        worker_finish(w);
        return;
    }
    xTimerInit(&w->deadline, on_deadline, w);
    xTimerStart(w->loop, &w->deadline, w->server->conf.shutdown_timeout_ms);
}

static void on_grace_over(xEventLoop *loop, xTimer *timer, void *arg) { begin_drain(arg); }

/* With a grace period the worker first only leaves (the health route has
 * turned 503 already, and every response closes its connection), then drains. */
static void begin_stop(xWorker *w) {
    if (w->state != XWORKER_SERVING) return;
    uint32_t grace_ms = w->server->conf.stop_grace_ms;
    if (grace_ms == 0) {
        begin_drain(w);
        return;
    }
    w->state = XWORKER_LEAVING;
    w->ctx.draining = true; /* HTTP/1.1 answers with Connection: close from now on */
    xTimerStart(w->loop, &w->grace, grace_ms);
}

static void on_stop_fd(xEventLoop *loop, int fd, unsigned events, void *arg) {
    uint64_t count;
    while (read(fd, &count, sizeof count) > 0) {
    }
    xWorker *w = arg;
    if (w->state == XWORKER_DRAINED) {
        if (all_workers_drained(w->server)) xEventLoopStop(loop);
        return;
    }
    begin_stop(w);
}

bool xHttpServerStopping(const xHttpServer *server) { return atomic_load(&server->stop_requested); }

void xHttpServerStop(xHttpServer *server) {
    atomic_store(&server->stop_requested, true);
    uint64_t one = 1;
    /* write(2) only: this may run inside a signal handler. */
    for (int i = 0; i < server->nworkers; i++) {
        ssize_t ignored = write(server->workers[i].stop_fd, &one, sizeof one);
        (void)ignored;
    }
    if (server->wake_fd >= 0) {
        ssize_t ignored = write(server->wake_fd, &one, sizeof one);
        (void)ignored;
    }
}

/* ---- Accepting ---- */

/* A socket of listener slot becomes a connection, peer its client. */
static void admit(xWorker *w, int slot, int fd, const xNetAddr *peer) {
    xTlsServer *tls = w->server->tls[slot];
    if (tls)
        xTlsAccept(&w->ctx.net, tls, fd, peer);
    else
        xUpgradeAccept(&w->ctx, fd, peer, &w->server->plans[slot]);
}

/* A socket whose PROXY header was read; the slot is the tag it waited with. */
static void admit_after_proxy(void *arg, unsigned slot, int fd, const xNetAddr *client) {
    xWorker *w = arg;
    if (w->state >= XWORKER_CLOSING) {
        close(fd);
        return;
    }
    admit(w, (int)slot, fd, client);
}

static void on_accept(xEventLoop *loop, int listen_fd, unsigned events, void *arg) {
    xWorker *w = arg;
    int slot = 0;
    while (slot < w->server->nlisteners - 1 && w->listen_fds[slot] != listen_fd) slot++;
    const xProxyTrust *proxy = w->server->proxy[slot];
    int fd;
    xNetAddr peer;
    while ((fd = xListenerAccept(listen_fd, w->server->ports[slot], &w->spare_fd, &peer)) >= 0) {
        if (w->ctx.net.conn_count + w->proxy_waits.count >= w->server->conf.max_connections ||
            w->state >= XWORKER_DRAINING) {
            close(fd);
            continue;
        }
        if (proxy && xProxyTrusted(proxy, &peer))
            xProxyWaitStart(&w->proxy_waits, fd, &peer, (unsigned)slot);
        else
            admit(w, slot, fd, &peer);
    }
}

/* Makes listener slot's UDP socket an HTTP/3 endpoint, on the worker's
 * own thread (or the caller's loop). */
static xErrno start_quic(xWorker *w, int slot) {
    xHttpServer *server = w->server;
    const xHttpServerConf *conf = &server->conf;
    xQuicEndpointConf qconf = {
        .tls = server->quic_tls[slot],
        .secret = server->quic_secret,
        .worker_id = (uint8_t)w->ctx.worker.index,
        .app = &xH3App,
        .app_arg = &w->ctx,
        .local_port = server->ports[slot],
        .max_streams_bidi = conf->http2_max_streams,
        .stream_window = 1u << 20,
        .conn_window = conf->http2_window,
        .idle_timeout_ms = conf->idle_timeout_ms,
        .handshake_timeout_ms = server->quic_handshake_ms[slot],
        .max_connections = conf->max_connections,
        .app_no_error = XH3_APP_NO_ERROR,
        .token_secret = server->quic_token_secret,
        .retry_from = server->quic_retry_from[slot],
    };
    int fd = w->quic_fds[slot];
    w->quic_fds[slot] = -1;
    w->quic[slot] = xQuicEndpointCreate(&w->ctx.net, fd, &qconf);
    if (!w->quic[slot]) return XERR_NOMEM;
    xQuicEndpointOnGone(w->quic[slot], on_quic_gone, &w->ctx.net);
    return XOK;
}

static xErrno start_listening(xWorker *w) {
    for (int i = 0; i < w->server->nlisteners; i++) {
        if (w->quic_fds[i] >= 0 && start_quic(w, i) != XOK) return XERR_NOMEM;
        if (w->listen_fds[i] < 0) continue;
        xErrno err = xEventLoopAdd(w->loop, w->listen_fds[i], XEV_READ | XEV_EDGE, on_accept, w);
        if (err != XOK) return err;
    }
    return XOK;
}

/* ---- Creating ---- */

static xErrno worker_init(xWorker *w, xHttpServer *server, xEventLoop *loop) {
    w->server = server;
    w->stop_fd = w->spare_fd = -1;
    for (int i = 0; i < XSERVER_MAX_LISTENERS; i++) w->listen_fds[i] = w->quic_fds[i] = -1;
    w->loop = loop ? loop : xEventLoopCreateWith(server->conf.io);
    if (!w->loop) return XERR_SYS;
    xErrno err = xHttpContextInit(&w->ctx, w->loop, &server->conf, server->router, &xUpgradeRequests);
    if (err != XOK) return err;
    xProxyWaitsInit(&w->proxy_waits, w->loop, server->conf.header_timeout_ms, admit_after_proxy, w);
    xTimerInit(&w->grace, on_grace_over, w);
    w->ctx.answers = &server->answers;
    w->ctx.owner = w;
    w->ctx.net.on_conn_gone = on_conn_gone;
    w->ctx.worker.index = (int)(w - server->workers);
    w->ctx.worker.pool = server->blocking;
    w->ctx.worker.blocking = &server->blocking_opts;
    w->ctx.worker.on_jobs_done = on_jobs_done;
    w->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    w->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (w->stop_fd < 0) return XERR_SYS;
    return xEventLoopAdd(w->loop, w->stop_fd, XEV_READ | XEV_EDGE, on_stop_fd, w);
}

static void run_stop_hook(xWorker *w) {
    if (w->stop_owed) w->server->worker_stop(&w->ctx.worker, w->server->worker_arg);
    w->stop_owed = false;
    w->ctx.worker.data = NULL;
}

static void worker_destroy(xWorker *w) {
    if (w->loop) {
        xTimerStop(w->loop, &w->grace);
        close_listeners(w);
        xProxyWaitsCloseAll(&w->proxy_waits);
        for_each_conn(w, xConnClose);
        close_quic(w);
        /* Blocking work still out (the pool is gone: all of it is back, in
         * posted calls) ends its requests while the worker still stands. */
        if (w->ctx.worker.jobs) xEventLoopRunPosted(w->loop);
        run_stop_hook(w);
        if (w->stop_fd >= 0) xEventLoopRemove(w->loop, w->stop_fd);
        xAccessLogClose(&w->log); /* after the last request's line */
    }
    if (w->stop_fd >= 0) close(w->stop_fd);
    if (w->spare_fd >= 0) close(w->spare_fd);
    xHttpContextDestroy(&w->ctx);
    xCompressFilterDestroy(w->ctx.filter);
    if (w->loop && !w->server->attached) xEventLoopDestroy(w->loop);
}

xHttpServer *xHttpServerCreate(xEventLoop *loop, const xHttpServerConf *conf) {
    xHttpServer *server = calloc(1, sizeof *server);
    if (!server) return NULL;
    xHttpServerConfInit(&server->conf);
    if (conf) xSizedAdopt(&server->conf, conf, sizeof server->conf);
    server->attached = loop != NULL;
    server->signal_fd = server->wake_fd = -1;
    pthread_mutex_init(&server->closing_listeners, NULL);
    server->nworkers = loop ? 1 : server->conf.workers > 0 ? server->conf.workers : cpus_available();
    server->conf.workers = server->nworkers;
    if (server->conf.handle_signals) {
        /* Blocked from here on, so a signal that arrives between Create and
         * Run is held for Run instead of killing the process. */
        sigemptyset(&server->stop_signals);
        sigaddset(&server->stop_signals, SIGINT);
        sigaddset(&server->stop_signals, SIGTERM);
        sigaddset(&server->stop_signals, SIGHUP);
        sigaddset(&server->stop_signals, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &server->stop_signals, &server->previous_mask);
    }
    if (server->conf.max_headers == 0) server->conf.max_headers = 1;
    server->answers = xHttpDefaultAnswers;
    server->router = xRouterCreate();
    server->workers = calloc((size_t)server->nworkers, sizeof *server->workers);
    xHttpBlockingOptsInit(&server->blocking_opts);
    server->blocking = xWorkPoolCreate(server->blocking_opts.threads, server->blocking_opts.max_queued);
    server->metrics = xMetricRegistryCreate(server->nworkers);
    bool ok = server->router && server->workers && server->blocking && server->metrics;
    for (int i = 0; ok && i < server->nworkers; i++) {
        ok = worker_init(&server->workers[i], server, loop) == XOK;
        server->workers[i].ctx.metrics = xMetricRegistryShard(server->metrics, i);
    }
    if (ok && !server->attached) ok = (server->wake_fd = eventfd(0, EFD_CLOEXEC)) >= 0;
    if (!ok) {
        xHttpServerDestroy(server);
        return NULL;
    }
    return server;
}

void xHttpServerDestroy(xHttpServer *server) {
    if (!server) return;
    xWorkPoolDestroy(server->blocking); /* first: its threads post to the workers' loops */
    for (int i = 0; server->workers && i < server->nworkers; i++) {
        if (server->workers[i].server) worker_destroy(&server->workers[i]);
    }
    free(server->workers);
    for (int i = 0; i < server->nlisteners; i++) {
        xTlsServerDestroy(server->tls[i]);
        xQuicTlsDestroy(server->quic_tls[i]);
        free(server->proxy[i]);
    }
    free(server->forwarded);
    xRouterDestroy(server->router);
    xMetricRegistryDestroy(server->metrics);
    xCompressConfDestroy(server->compress);
    while (server->targets) {
        xHttpRouteTarget *next = server->targets->next;
        if (server->targets->free_arg) server->targets->free_arg(server->targets->arg);
        free(server->targets);
        server->targets = next;
    }
    free((char *)server->log_opts.path);
    for (size_t i = 0; i < server->answers.num_error_bodies; i++) {
        free(server->answers.error_bodies[i].content_type);
        free(server->answers.error_bodies[i].body);
    }
    free(server->answers.error_bodies);
    if (server->wake_fd >= 0) close(server->wake_fd);
    if (server->conf.handle_signals) pthread_sigmask(SIG_SETMASK, &server->previous_mask, NULL);
    pthread_mutex_destroy(&server->closing_listeners);
    free(server);
}

static xErrno add_route(xHttpServer *server, const char *spec, xHttpHandler handler, void *arg,
                        bool streams_body, bool unfiltered, void (*free_arg)(void *)) {
    if (server->running) return XERR_STATE;
    if (!spec || !handler) return XERR_INVALID;
    xHttpRouteTarget *target = malloc(sizeof *target);
    if (!target) return XERR_NOMEM;
    *target = (xHttpRouteTarget){.handler = handler,
                                 .arg = arg,
                                 .streams_body = streams_body,
                                 .unfiltered = unfiltered,
                                 .free_arg = free_arg,
                                 .next = server->targets};
    xErrno err = xMetricRegistryAddRoute(server->metrics, spec, &target->route_index);
    if (err == XOK && (err = xRouterAdd(server->router, spec, target, NULL)) != XOK)
        xMetricRegistryDropRoute(server->metrics);
    if (err != XOK) {
        free(target);
        return err;
    }
    server->targets = target;
    return XOK;
}

xErrno xHttpServerRoute(xHttpServer *server, const char *spec, xHttpHandler handler, void *arg) {
    return add_route(server, spec, handler, arg, false, false, NULL);
}

xErrno xHttpServerRouteStreaming(xHttpServer *server, const char *spec, xHttpHandler handler, void *arg) {
    return add_route(server, spec, handler, arg, true, false, NULL);
}

xErrno xHttpServerRouteUncompressed(xHttpServer *server, const char *spec, xHttpHandler handler, void *arg) {
    return add_route(server, spec, handler, arg, false, true, NULL);
}

/* ---- The answers the server writes itself ---- */

/* True when value is a field value HTTP allows (no CR, LF or other control). */
static bool is_field_value(const char *value) {
    for (const unsigned char *p = (const unsigned char *)value; *p; p++)
        if (!xHttpIsFieldChar(*p)) return false;
    return true;
}

xErrno xHttpServerSetServerName(xHttpServer *server, const char *name) {
    if (server->running) return XERR_STATE;
    if (!name) name = "";
    xHttpOwnAnswers *a = &server->answers;
    size_t n = strlen(name);
    if (!is_field_value(name) || n + 10 >= sizeof a->server_line) return XERR_INVALID;
    a->server_line_len =
        n ? (size_t)snprintf(a->server_line, sizeof a->server_line, "Server: %s\r\n", name) : 0;
    a->server_line[a->server_line_len] = '\0';
    a->server_name = (xStr){a->server_line + 8, n};
    return XOK;
}

static xErrno set_fallback(xHttpServer *server, xHttpRouteTarget *target, const xHttpRouteTarget **slot,
                           xHttpHandler handler, void *arg) {
    if (server->running) return XERR_STATE;
    *target = (xHttpRouteTarget){.handler = handler, .arg = arg};
    *slot = handler ? target : NULL;
    return XOK;
}

xErrno xHttpServerRouteNotFound(xHttpServer *server, xHttpHandler handler, void *arg) {
    return set_fallback(server, &server->not_found, &server->answers.not_found, handler, arg);
}

xErrno xHttpServerRouteMethodNotAllowed(xHttpServer *server, xHttpHandler handler, void *arg) {
    return set_fallback(server, &server->not_allowed, &server->answers.not_allowed, handler, arg);
}

xErrno xHttpServerErrorBody(xHttpServer *server, int status, const char *content_type, const void *body,
                            size_t len) {
    if (server->running) return XERR_STATE;
    if ((status != 0 && (status < 400 || status > 599)) || !content_type || !*content_type ||
        !is_field_value(content_type) || (len && !body))
        return XERR_INVALID;
    xHttpOwnAnswers *a = &server->answers;
    size_t line_len = strlen(content_type) + 16;
    char *line = malloc(line_len + 1), *copy = malloc(len ? len : 1);
    xHttpErrorBody *slot = NULL;
    for (size_t i = 0; i < a->num_error_bodies && !slot; i++)
        if (a->error_bodies[i].status == status) slot = &a->error_bodies[i];
    xHttpErrorBody *grown = slot ? NULL : realloc(a->error_bodies, (a->num_error_bodies + 1) * sizeof *grown);
    if (!line || !copy || (!slot && !grown)) {
        free(line);
        free(copy);
        return XERR_NOMEM;
    }
    if (!slot) {
        a->error_bodies = grown;
        slot = &grown[a->num_error_bodies++];
    } else {
        free(slot->content_type);
        free(slot->body);
    }
    snprintf(line, line_len + 1, "Content-Type: %s\r\n", content_type);
    if (len) memcpy(copy, body, len);
    *slot = (xHttpErrorBody){status, line, line_len, copy, len};
    return XOK;
}

/* ---- Compression ---- */

xErrno xHttpServerCompress(xHttpServer *server, const xHttpCompressOptions *opts) {
    if (server->running || server->compress) return XERR_STATE;
    xErrno err = xCompressConfCreate(opts, &server->compress);
    for (int i = 0; err == XOK && i < server->nworkers; i++)
        if (!(server->workers[i].ctx.filter = xCompressFilterCreate(server->compress))) err = XERR_NOMEM;
    if (err == XOK) return XOK;
    for (int i = 0; server->compress && i < server->nworkers; i++) {
        xCompressFilterDestroy(server->workers[i].ctx.filter);
        server->workers[i].ctx.filter = NULL;
    }
    xCompressConfDestroy(server->compress);
    server->compress = NULL;
    return err;
}

/* ---- WebSocket ---- */

xErrno xHttpServerWebSocket(xHttpServer *server, const char *path, const xWebSocketConf *conf, void *arg) {
    if (server->running) return XERR_STATE;
    char spec[1024];
    if (!path || snprintf(spec, sizeof spec, "GET %s", path) >= (int)sizeof spec) return XERR_INVALID;
    xErrno err;
    xWsRoute *route = xWsRouteCreate(conf, arg, &err);
    if (!route) return err;
    err = add_route(server, spec, xWsRouteHandler, route, false, true, xWsRouteFree);
    if (err != XOK) {
        xWsRouteFree(route);
        return err;
    }
    /* RFC 8441 over HTTP/2: an extended CONNECT to the same path, its
     * stream carrying the frames (the GET target owns the route). */
    snprintf(spec, sizeof spec, "CONNECT %s", path);
    return add_route(server, spec, xWsTunnelHandler, route, true, true, NULL);
}

/* ---- Per-worker hooks and blocking work ---- */

/* Runs w's start hook, if there is one, and notes whether its stop is owed. */
static xErrno run_start_hook(xWorker *w) {
    xHttpServer *server = w->server;
    xErrno err = XOK;
    w->ctx.worker.error[0] = '\0';
    if (server->worker_start) err = server->worker_start(&w->ctx.worker, server->worker_arg);
    w->stop_owed = server->worker_stop && err == XOK;
    return err;
}

/* Says in the server's last error why worker index's start failed. */
static void start_failed(xHttpServer *server, int index, xErrno err, const char *why) {
    snprintf(server->last_error, sizeof server->last_error, "worker %d: start failed: %s", index,
             why && *why ? why : xErrnoString(err));
}

xErrno xHttpServerOnWorker(xHttpServer *server, xHttpWorkerStartFn start, xHttpWorkerStopFn stop, void *arg) {
    if (server->running) return XERR_STATE;
    if (server->has_worker_hooks) return XERR_EXISTS;
    server->has_worker_hooks = true;
    server->worker_start = start;
    server->worker_stop = stop;
    server->worker_arg = arg;
    if (!server->attached) return XOK;
    /* On a caller's loop, the worker is already there: it starts now. */
    xWorker *w = &server->workers[0];
    xErrno err = run_start_hook(w);
    if (err == XOK) return XOK;
    start_failed(server, 0, err, w->ctx.worker.error);
    server->has_worker_hooks = false; /* the caller may try again */
    server->worker_start = NULL;
    server->worker_stop = NULL;
    return err;
}

void xHttpBlockingOptsInitSized(xHttpBlockingOpts *opts, size_t size) {
    xHttpBlockingOpts defaults = {
        .threads = 4,
        .max_queued = 1024,
        .answer_busy = true,
        .retry_after_s = 1,
    };
    xSizedInit(opts, size, &defaults, sizeof defaults);
}

xErrno xHttpServerBlockingPool(xHttpServer *server, const xHttpBlockingOpts *opts) {
    if (server->running) return XERR_STATE;
    if (!opts) return XERR_INVALID;
    xHttpBlockingOpts own;
    xHttpBlockingOptsInit(&own);
    xSizedAdopt(&own, opts, sizeof own);
    xErrno err = xWorkPoolLimit(server->blocking, own.threads, own.max_queued);
    if (err == XOK) server->blocking_opts = own;
    return err;
}

/* ---- Listening ---- */

/* Where a listener's sockets come from: an address, bound here, or a
 * listening socket made by someone else (inherited, passed by systemd). */
typedef struct xListenSource {
    const char *host;
    uint16_t port;
    int fd; /* >= 0: inherited; host and port are then unused */
} xListenSource;

/* Says in the last error that listening failed, and why. */
static xErrno listen_failed(xHttpServer *server, xErrno err, const xListenSource *from) {
    const char *why = xErrnoString(err), *sep = err == XERR_SYS ? ": " : "",
               *sys = err == XERR_SYS ? strerror(errno) : "";
    if (from->fd >= 0)
        snprintf(server->last_error, sizeof server->last_error, "cannot listen on descriptor %d: %s%s%s",
                 from->fd, why, sep, sys);
    else
        snprintf(server->last_error, sizeof server->last_error, "cannot listen on %s:%u: %s%s%s",
                 from->host && *from->host ? from->host : "0.0.0.0", from->port, why, sep, sys);
    return err;
}

/* OpenSSL writes with write(2) and files leave with sendfile(2), neither of
 * which takes MSG_NOSIGNAL: a peer that has gone must cost an EPIPE, not the
 * process. Left alone if the application chose a handler. */
static void ignore_sigpipe(void) {
    struct sigaction current;
    if (sigaction(SIGPIPE, NULL, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
}

/* Closes the first count workers' sockets of slot. */
static void unlisten_slot(xHttpServer *server, int slot, int count) {
    for (int j = 0; j < count; j++) {
        close(server->workers[j].listen_fds[slot]);
        server->workers[j].listen_fds[slot] = -1;
    }
}

/* Says once whether a copy of the server that stops will hand its queued
 * connections to the one that stays, or reset them; with the reuseport
 * program, new connections come to slot's sockets, this copy's, from now on,
 * and none to the copy it replaces. */
static void hand_over_on_close(xHttpServer *server, int slot) {
    int first = server->workers[0].listen_fds[slot], *fds = malloc((size_t)server->nworkers * sizeof *fds);
    for (int i = 0; fds && i < server->nworkers; i++) fds[i] = server->workers[i].listen_fds[slot];
    /* Out of memory, the first worker's socket takes the new connections alone. */
    xListenerHandover how = xListenerHandOverOnClose(fds ? fds : &first, fds ? server->nworkers : 1);
    int saved = errno;
    free(fds);
    errno = saved;
    switch (how) {
    case XLISTENER_HANDOVER_SYSCTL: break;
    case XLISTENER_HANDOVER_PROGRAM:
        XLOG_INFO("shared port: new connections come to this copy, and a stopping copy hands its queued "
                  "connections over (reuseport program)");
        break;
    case XLISTENER_HANDOVER_DROPPED:
        XLOG_WARN("shared port: a stopping copy will reset the connections queued on it (%s); set "
                  "net.ipv4.tcp_migrate_req=1, or give the server CAP_BPF, to have them handed over",
                  strerror(errno));
        break;
    }
}

/* Binds a probe on addr's port (0: the kernel picks one) and returns it,
 * the port set in addr; with udp, one whose UDP port of the same number is
 * free as well (HTTP/3 takes it), trying other ports when the kernel picked
 * one whose UDP side is taken. -1 with errno. */
static int probe_port(struct sockaddr_storage *addr, socklen_t len, bool udp) {
    bool any = xListenerPortOf(addr) == 0;
    for (int attempt = 0; attempt < 32; attempt++) {
        int probe = xListenerOpen(addr, len, false);
        if (probe < 0 || !udp) return probe;
        struct sockaddr_storage same = *addr;
        xListenerSetPort(&same, xListenerPort(probe));
        int udp_probe = xQuicSocketOpen(&same, len, false);
        if (udp_probe >= 0) {
            close(udp_probe);
            return probe;
        }
        int saved = errno;
        close(probe);
        errno = saved;
        if (!any || errno != EADDRINUSE) return -1;
    }
    errno = EADDRINUSE;
    return -1;
}

/* Opens slot's sockets on host:port, one SO_REUSEPORT socket per worker;
 * *bound gets the port. With udp, a port picked here has its UDP twin free
 * too (HTTP/3 takes it). */
static xErrno bind_slot(xHttpServer *server, int slot, const xListenSource *from, bool udp, uint16_t *bound) {
    struct sockaddr_storage addr;
    socklen_t len;
    xErrno err = xListenerResolve(from->host, from->port, &addr, &len);
    if (err != XOK) return listen_failed(server, err, from);
    /* Sockets that all set SO_REUSEPORT share a port silently, so a second
     * server on our port would go unnoticed: probe without it first, unless
     * sharing is what was asked for. The probe also settles port 0. */
    if (!server->conf.shared_port || from->port == 0) {
        int probe = probe_port(&addr, len, udp);
        if (probe < 0)
            return listen_failed(server,
                                 errno == EADDRINUSE      ? XERR_BUSY
                                 : errno == EADDRNOTAVAIL ? XERR_ADDR
                                                          : XERR_SYS,
                                 from);
        xListenerSetPort(&addr, xListenerPort(probe));
        close(probe);
    }
    for (int i = 0; i < server->nworkers; i++) {
        int fd = xListenerOpen(&addr, len, true);
        if (fd < 0 || listen(fd, XSERVER_BACKLOG) != 0) {
            err = fd >= 0 || errno != EADDRINUSE ? XERR_SYS : XERR_BUSY;
            if (fd >= 0) close(fd);
            unlisten_slot(server, slot, i);
            return listen_failed(server, err, from);
        }
        server->workers[i].listen_fds[slot] = fd;
    }
    *bound = xListenerPort(server->workers[0].listen_fds[slot]);
    return XOK;
}

/* Gives every worker its own descriptor of the inherited socket from->fd
 * (one socket: the kernel queues its connections once, and whichever worker
 * is woken first takes them), then closes from->fd: the copies hold it. */
static xErrno adopt_slot(xHttpServer *server, int slot, const xListenSource *from, uint16_t *bound) {
    if (!xListenerAdopt(from->fd, XSERVER_BACKLOG)) return listen_failed(server, XERR_SYS, from);
    for (int i = 0; i < server->nworkers; i++) {
        int fd = fcntl(from->fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) {
            unlisten_slot(server, slot, i);
            return listen_failed(server, XERR_SYS, from);
        }
        server->workers[i].listen_fds[slot] = fd;
    }
    *bound = xListenerPort(from->fd);
    close(from->fd);
    return XOK;
}

/* Adds listener slot server->nlisteners with sockets from `from`; tls (may be
 * NULL) is the slot's from then on. */
static xErrno listen_on(xHttpServer *server, const xListenSource *from, xTlsServer *tls,
                        const xUpgradePlan *plan, bool udp) {
    if (server->running || server->nlisteners == XSERVER_MAX_LISTENERS) {
        snprintf(server->last_error, sizeof server->last_error, "cannot listen: %s",
                 server->running ? "the server is running" : "too many listeners");
        return XERR_STATE;
    }
    ignore_sigpipe();
    int slot = server->nlisteners;
    uint16_t bound_port = 0;
    xErrno err = from->fd >= 0 ? adopt_slot(server, slot, from, &bound_port)
                               : bind_slot(server, slot, from, udp, &bound_port);
    if (err != XOK) return err;
    server->ports[slot] = bound_port; /* before the first accept, which reads it */
    server->bound_here[slot] = from->fd < 0;
    /* On the caller's loop, which may run without xHttpServerRun, the port is
     * taken over now; workers take it over once they start (steer_here). */
    if (server->attached && server->conf.shared_port && server->bound_here[slot])
        hand_over_on_close(server, slot);
    if (server->attached) {
        /* The caller may run its loop without xHttpServerRun: accept now. */
        xWorker *w = &server->workers[0];
        err = xEventLoopAdd(w->loop, w->listen_fds[slot], XEV_READ | XEV_EDGE, on_accept, w);
        if (err != XOK) {
            unlisten_slot(server, slot, 1); /* the slot stays free: the caller still owns tls */
            return listen_failed(server, err, from);
        }
    }
    server->tls[slot] = tls;
    if (plan != &server->plans[slot]) server->plans[slot] = *plan;
    server->nlisteners++;
    server->last_error[0] = '\0';
    return XOK;
}
xErrno xHttpServerListen(xHttpServer *server, const char *host, uint16_t port) {
    return xHttpServerListenProtocols(server, host, port, server->conf.protocols);
}

/* A cleartext listener speaking protocols, its sockets from `from`. */
static xErrno listen_cleartext(xHttpServer *server, const xListenSource *from, unsigned protocols) {
    unsigned known = XHTTP_PROTO_HTTP1 | XHTTP_PROTO_HTTP2;
    if (!(protocols & known) || (protocols & ~(server->conf.protocols & known))) {
        snprintf(server->last_error, sizeof server->last_error,
                 "listen: protocols 0x%x are none, or not all spoken by the server (0x%x)", protocols,
                 server->conf.protocols);
        return XERR_INVALID;
    }
    xUpgradePlan plan;
    xUpgradePlanCleartext(&plan, protocols);
    return listen_on(server, from, NULL, &plan, false);
}

/* HTTP/3 beside TLS listener slot: one UDP socket per worker on the same
 * address and port number, SO_REUSEPORT as TCP's. Connection IDs name the
 * worker in their first byte, and a reuseport program steers datagrams by
 * it, so a connection's packets reach its worker even from a new address
 * (migration, NAT rebinding); a client's first packets, whose IDs are its
 * own, are spread by the kernel's hash of their addresses. Where the kernel
 * refuses the program, the hash alone decides: a packet from a changed
 * address may reach another worker, which drops it (its ID names another
 * worker, so it gets no stateless reset) and the connection times out. */
static xErrno listen_quic(xHttpServer *server, const xListenSource *from, int slot, const xTlsConf *conf) {
    /* The TCP socket's own address, bound here or inherited. */
    struct sockaddr_storage addr;
    socklen_t len = sizeof addr;
    if (getsockname(server->workers[0].listen_fds[slot], (struct sockaddr *)&addr, &len) != 0)
        return listen_failed(server, XERR_SYS, from);
    xErrno err;
    xQuicTls *tls = xQuicTlsCreate(conf, server->last_error, sizeof server->last_error);
    if (!tls) return XERR_TLS;
    xQuicTlsRandom(server->quic_secret, sizeof server->quic_secret); /* before any connection */
    xQuicTlsRandom(server->quic_token_secret, sizeof server->quic_token_secret);
    for (int i = 0; i < server->nworkers; i++) {
        int fd = xQuicSocketOpen(&addr, len, true);
        if (fd < 0) {
            err = errno == EADDRINUSE ? XERR_BUSY : XERR_SYS;
            for (int j = 0; j < i; j++) {
                close(server->workers[j].quic_fds[slot]);
                server->workers[j].quic_fds[slot] = -1;
            }
            xQuicTlsDestroy(tls);
            return listen_failed(server, err, from);
        }
        server->workers[i].quic_fds[slot] = fd;
    }
    if (server->nworkers > 1 && !xQuicSocketSteer(server->workers[0].quic_fds[slot]))
        XLOG_WARN("h3: packets cannot be steered to their worker (%s): a client that changes address "
                  "may lose its connection",
                  strerror(errno));
    server->quic_tls[slot] = tls;
    server->quic_handshake_ms[slot] = conf->handshake_timeout_ms;
    server->quic_retry_from[slot] = conf->http3_retry         ? 0
                                    : conf->http3_retry_flood ? conf->http3_retry_flood
                                                              : SIZE_MAX;
    for (int i = 0; conf->http3_alt_svc && i < server->nworkers; i++) {
        xHttpContext *ctx = &server->workers[i].ctx;
        if (ctx->alt_svc_count == XHTTP_MAX_ALT_SVC) break; /* as many as listeners */
        xHttpAltSvc *a = &ctx->alt_svc[ctx->alt_svc_count++];
        a->port = server->ports[slot];
        a->len = (uint8_t)snprintf(a->line, sizeof a->line, "Alt-Svc: h3=\":%u\"\r\n", a->port);
    }
    if (server->attached && start_quic(&server->workers[0], slot) != XOK) return XERR_NOMEM;
    return XOK;
}

xErrno xHttpServerListenProtocols(xHttpServer *server, const char *host, uint16_t port, unsigned protocols) {
    return listen_cleartext(server, &(xListenSource){.host = host, .port = port, .fd = -1}, protocols);
}

xErrno xHttpServerListenFd(xHttpServer *server, int fd) {
    if (fd < 0) return XERR_INVALID;
    return listen_cleartext(server, &(xListenSource){.fd = fd}, server->conf.protocols);
}

/* A TLS listener, its sockets from `from`. */
static xErrno listen_tls(xHttpServer *server, const xListenSource *from, const xTlsConf *caller_conf) {
    if (!caller_conf) {
        snprintf(server->last_error, sizeof server->last_error, "tls: no configuration given");
        return XERR_INVALID;
    }
    xTlsConf full;
    xTlsConfInit(&full);
    xSizedAdopt(&full, caller_conf, sizeof full);
    const xTlsConf *conf = &full;
    int slot = server->nlisteners;
    if (slot == XSERVER_MAX_LISTENERS) return listen_on(server, from, NULL, NULL, false); /* says why */
    /* The plan lives in its slot: the TLS callbacks point at it. */
    xUpgradePlan *plan = &server->plans[slot];
    if (!xUpgradePlanListener(plan, server->conf.protocols, conf->alpn, server->last_error,
                              sizeof server->last_error))
        return XERR_TLS;
    xTlsListen listen = xUpgradeTlsListen(plan);
    xTlsServer *tls = xTlsServerCreate(conf, &listen, server->last_error, sizeof server->last_error);
    if (!tls) return XERR_TLS;
    xErrno err = listen_on(server, from, tls, plan, conf->http3);
    if (err != XOK) {
        xTlsServerDestroy(tls);
        return err;
    }
    xTlsLogKernelSupport(conf);
    return conf->http3 ? listen_quic(server, from, slot, conf) : XOK;
}

xErrno xHttpServerListenTls(xHttpServer *server, const char *host, uint16_t port, const xTlsConf *conf) {
    return listen_tls(server, &(xListenSource){.host = host, .port = port, .fd = -1}, conf);
}

xErrno xHttpServerListenTlsFd(xHttpServer *server, int fd, const xTlsConf *conf) {
    if (fd < 0) return XERR_INVALID;
    return listen_tls(server, &(xListenSource){.fd = fd}, conf);
}

/* ---- Sockets passed by systemd (sd_listen_fds(3)) ---- */

/* Listens on each socket systemd passed named name (any, when NULL) that no
 * earlier call took; TLS with tls_conf when it is not NULL. */
static xErrno listen_systemd(xHttpServer *server, const char *name, const xTlsConf *tls_conf, int *count) {
    *count = 0;
    xListenerPassed passed[XLISTENER_PASSED_MAX];
    int n = xListenerSystemd(passed, XLISTENER_PASSED_MAX);
    for (int i = 0; i < n; i++) {
        if ((server->systemd_taken & (1u << i)) || (name && strcmp(name, passed[i].name) != 0)) continue;
        xListenSource from = {.fd = passed[i].fd};
        xErrno err = tls_conf ? listen_tls(server, &from, tls_conf)
                              : listen_cleartext(server, &from, server->conf.protocols);
        if (err != XOK) return err;
        server->systemd_taken |= 1u << i; /* its descriptor is closed: never again */
        ++*count;
    }
    return XOK;
}

xErrno xHttpServerListenSystemd(xHttpServer *server, const char *name, int *count) {
    return listen_systemd(server, name, NULL, count);
}

xErrno xHttpServerListenTlsSystemd(xHttpServer *server, const char *name, const xTlsConf *conf, int *count) {
    if (!conf) {
        *count = 0;
        snprintf(server->last_error, sizeof server->last_error, "tls: no configuration given");
        return XERR_INVALID;
    }
    return listen_systemd(server, name, conf, count);
}

xErrno xHttpServerReloadTls(xHttpServer *server) {
    for (int i = 0; i < server->nlisteners; i++) {
        if (!server->tls[i]) continue;
        xErrno err = xTlsServerReload(server->tls[i], server->last_error, sizeof server->last_error);
        if (err == XOK && server->quic_tls[i])
            err = xQuicTlsReload(server->quic_tls[i], server->last_error, sizeof server->last_error);
        if (err != XOK) return err;
    }
    server->last_error[0] = '\0';
    return XOK;
}

const char *xHttpServerLastError(const xHttpServer *server) { return server->last_error; }

uint16_t xHttpServerPort(const xHttpServer *server) { return server->ports[0]; }

uint16_t xHttpServerListenerPort(const xHttpServer *server, int index) {
    if (index < 0 || index >= server->nlisteners) return 0;
    return server->ports[index];
}

/* The networks a PROXY header or Forwarded field is trusted from, parsed into a new
 * xProxyTrust (*out; NULL where none are given): XOK, XERR_NOMEM, or XERR_INVALID with
 * last_error saying why. */
static xErrno parse_trust(xHttpServer *server, const char *trusted_networks, xProxyTrust **out) {
    *out = NULL;
    if (!trusted_networks) return XOK;
    xProxyTrust *trust = malloc(sizeof *trust);
    if (!trust) return XERR_NOMEM;
    if (!xProxyTrustParse(trust, trusted_networks, server->last_error, sizeof server->last_error)) {
        free(trust);
        return XERR_INVALID;
    }
    *out = trust;
    return XOK;
}

xErrno xHttpServerProxyProtocol(xHttpServer *server, int index, const char *trusted_networks) {
    if (server->running) return XERR_STATE;
    if (index < 0 || index >= server->nlisteners) {
        snprintf(server->last_error, sizeof server->last_error, "proxy protocol: no listener %d", index);
        return XERR_INVALID;
    }
    xProxyTrust *trust;
    xErrno err = parse_trust(server, trusted_networks, &trust);
    if (err != XOK) return err;
    free(server->proxy[index]);
    server->proxy[index] = trust;
    server->last_error[0] = '\0';
    return XOK;
}

xErrno xHttpServerTrustForwarded(xHttpServer *server, const char *trusted_networks) {
    if (server->running) return XERR_STATE;
    xProxyTrust *trust;
    xErrno err = parse_trust(server, trusted_networks, &trust);
    if (err != XOK) return err;
    free(server->forwarded);
    server->forwarded = trust;
    for (int i = 0; i < server->nworkers; i++) server->workers[i].ctx.forwarded = trust;
    server->last_error[0] = '\0';
    return XOK;
}

/* The health route: 200 while serving, 503 from the moment a stop begins
 * (a load balancer's check takes the server out while it still serves). */
static void on_health(xHttpRequest *req, xHttpResponse *res, void *arg) {
    bool stopping = xHttpServerStopping(arg);
    xHttpResponseSetStatus(res, stopping ? 503 : 200);
    xHttpResponseAddHeader(res, "Content-Type", "text/plain");
    xHttpResponseAddHeader(res, "Cache-Control", "no-store");
    if (stopping)
        xHttpResponseSendRef(res, "stopping\n", 9, NULL, NULL);
    else
        xHttpResponseSendRef(res, "ok\n", 3, NULL, NULL);
}

xErrno xHttpServerHealthRoute(xHttpServer *server, const char *path) {
    if (!path || path[0] != '/') return XERR_INVALID;
    char spec[1024];
    if (snprintf(spec, sizeof spec, "GET %s", path) >= (int)sizeof spec) return XERR_INVALID;
    return xHttpServerRoute(server, spec, on_health, server);
}

int xHttpServerWorkerCount(const xHttpServer *server) { return server->nworkers; }

/* ---- Running ---- */

/* Waits at the gate until every worker's start has returned; started is this
 * worker's. Returns XOK when every start succeeded. */
static xErrno pass_start_gate(xWorker *w, xErrno started) {
    xStartGate *gate = w->server->gate;
    pthread_mutex_lock(&gate->lock);
    if (started != XOK && gate->failure == XOK) {
        gate->failure = started;
        start_failed(w->server, w->ctx.worker.index, started, w->ctx.worker.error);
    }
    if (--gate->waiting == 0) pthread_cond_broadcast(&gate->opened);
    while (gate->waiting > 0) pthread_cond_wait(&gate->opened, &gate->lock);
    xErrno all = gate->failure;
    pthread_mutex_unlock(&gate->lock);
    return all;
}

static void *worker_main(void *arg) {
    xWorker *w = arg;
    if (pass_start_gate(w, run_start_hook(w)) == XOK) {
        if (start_listening(w) != XOK) XLOG_ERROR("worker could not watch its listeners");
        if (xEventLoopRun(w->loop) != XOK) XLOG_ERROR("event loop failed: %s", strerror(errno));
    }
    run_stop_hook(w); /* on its own thread, once its requests and blocking work are done */
    return NULL;
}

/* SIGHUP rereads the certificates and SIGUSR1 reopens the logs, as nginx
 * does; the others stop. Returns true for a stop. */
static bool handle_signal(xHttpServer *server, unsigned signo) {
    if (signo == SIGUSR1) {
        xHttpServerReopenLogs(server);
        return false;
    }
    if (signo != SIGHUP) {
        XLOG_INFO("signal %u: stopping gracefully", signo);
        return true;
    }
    if (xHttpServerReloadTls(server) == XOK)
        XLOG_INFO("SIGHUP: TLS certificates reloaded");
    else
        XLOG_ERROR("SIGHUP: TLS reload failed, the old certificates stay: %s", server->last_error);
    return false;
}

static void on_signal(xEventLoop *loop, int fd, unsigned events, void *arg) {
    struct signalfd_siginfo info;
    bool stop = false;
    while (read(fd, &info, sizeof info) == (ssize_t)sizeof info) stop |= handle_signal(arg, info.ssi_signo);
    if (stop) xHttpServerStop(arg);
}

static xErrno run_attached(xHttpServer *server) {
    xEventLoop *loop = server->workers[0].loop;
    if (server->conf.handle_signals) {
        server->signal_fd = signalfd(-1, &server->stop_signals, SFD_NONBLOCK | SFD_CLOEXEC);
        if (server->signal_fd >= 0)
            xEventLoopAdd(loop, server->signal_fd, XEV_READ | XEV_EDGE, on_signal, server);
    }
    server->runs_loop = true;
    xErrno err = xEventLoopRun(loop);
    server->runs_loop = false;
    if (server->signal_fd >= 0) {
        xEventLoopRemove(loop, server->signal_fd);
        close(server->signal_fd);
        server->signal_fd = -1;
    }
    return err;
}

/* New connections on a shared port come to this copy from here on, as its
 * workers have started: a copy being replaced takes them until then, and gets
 * none after, so none reaches it as it stops (see listener.c). */
static void steer_here(xHttpServer *server) {
    if (!server->conf.shared_port) return;
    for (int slot = 0; slot < server->nlisteners; slot++)
        if (server->bound_here[slot]) hand_over_on_close(server, slot);
}

/* The calling thread only supervises: it waits for a stop signal or call,
 * then for the workers to drain. */
static xErrno run_workers(xHttpServer *server) {
    /* Workers inherit this thread's mask, where Create blocked the stop
     * signals: only the signalfd below receives them. */
    int sfd = server->conf.handle_signals ? signalfd(-1, &server->stop_signals, SFD_CLOEXEC) : -1;
    xStartGate gate = {.waiting = server->nworkers, .failure = XOK};
    pthread_mutex_init(&gate.lock, NULL);
    pthread_cond_init(&gate.opened, NULL);
    server->gate = &gate;
    int started = 0, refused = 0;
    while (!refused && started < server->nworkers) {
        xWorker *w = &server->workers[started];
        if (!(refused = pthread_create(&w->thread, NULL, worker_main, w))) started++;
    }
    /* The gate opens once every start has returned, a thread that never
     * began counting as a failed one. */
    pthread_mutex_lock(&gate.lock);
    if (refused) {
        gate.waiting -= server->nworkers - started;
        if (gate.failure == XOK) {
            gate.failure = XERR_SYS;
            snprintf(server->last_error, sizeof server->last_error, "cannot start worker %d: %s", started,
                     strerror(refused));
        }
        pthread_cond_broadcast(&gate.opened);
    }
    while (gate.waiting > 0) pthread_cond_wait(&gate.opened, &gate.lock);
    xErrno err = gate.failure;
    pthread_mutex_unlock(&gate.lock);
    if (err == XOK && !atomic_load(&server->stop_requested)) steer_here(server);
    struct pollfd fds[2] = {{.fd = server->wake_fd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    while (err == XOK && !atomic_load(&server->stop_requested)) {
        if (poll(fds, sfd >= 0 ? 2 : 1, -1) > 0 && (fds[1].revents & POLLIN)) {
            struct signalfd_siginfo info;
            if (read(sfd, &info, sizeof info) == (ssize_t)sizeof info &&
                !handle_signal(server, info.ssi_signo))
                continue;
            break;
        }
    }
    xHttpServerStop(server);
    for (int i = 0; i < started; i++) pthread_join(server->workers[i].thread, NULL);
    server->gate = NULL;
    pthread_cond_destroy(&gate.opened);
    pthread_mutex_destroy(&gate.lock);
    if (sfd >= 0) close(sfd);
    return err;
}

xErrno xHttpServerRun(xHttpServer *server) {
    if (server->running) return XERR_STATE;
    if (server->nlisteners == 0) return XERR_STATE;
    server->running = true;
    xErrno err = server->attached ? run_attached(server) : run_workers(server);
    server->running = false;
    return err;
}

/* ---- Access log and metrics ---- */

/* Each worker's responses are timed and told to the observer (durations,
 * access log) from now on: its loop samples a microsecond clock each turn. */
static void observe_finished(xHttpServer *server) {
    for (int i = 0; i < server->nworkers; i++) {
        xWorker *w = &server->workers[i];
        w->ctx.on_finished = xObserverFinished;
        w->ctx.on_finished_arg = server->logging ? &w->log : NULL;
        xEventLoopPreciseClock(w->loop, true);
    }
}

void xHttpAccessLogOptsInitSized(xHttpAccessLogOpts *opts, size_t size) {
    xHttpAccessLogOpts defaults = {
        .fd = -1,
        .format = XHTTP_LOG_COMBINED,
        .buffer_size = 64u << 10,
        .flush_ms = 100,
    };
    xSizedInit(opts, size, &defaults, sizeof defaults);
}

xErrno xHttpServerAccessLog(xHttpServer *server, const xHttpAccessLogOpts *opts) {
    if (server->running || server->logging) return XERR_STATE;
    if (!opts) return XERR_INVALID;
    xHttpAccessLogOpts *own = &server->log_opts;
    xHttpAccessLogOptsInit(own);
    xSizedAdopt(own, opts, sizeof *own);
    if ((!own->path && own->fd < 0) || own->format > XHTTP_LOG_JSON) return XERR_INVALID;
    if (own->path && !(own->path = strdup(own->path))) return XERR_NOMEM;
    for (int i = 0; i < server->nworkers; i++) {
        xWorker *w = &server->workers[i];
        if (xAccessLogOpen(&w->log, w->loop, own) != XOK) {
            snprintf(server->last_error, sizeof server->last_error, "access log: cannot open %s: %s",
                     own->path, strerror(errno));
            while (i-- > 0) xAccessLogClose(&server->workers[i].log);
            free((char *)own->path);
            own->path = NULL;
            return XERR_SYS;
        }
    }
    server->logging = true;
    observe_finished(server);
    return XOK;
}

static void reopen_on_worker(xEventLoop *loop, void *arg) { xAccessLogReopen(&((xWorker *)arg)->log); }

xErrno xHttpServerReopenLogs(xHttpServer *server) {
    if (!server->logging || !server->log_opts.path) return XOK;
    xErrno err = XOK;
    for (int i = 0; i < server->nworkers; i++) {
        xErrno posted = xEventLoopPost(server->workers[i].loop, reopen_on_worker, &server->workers[i]);
        if (posted != XOK) err = posted;
    }
    return err;
}

void xHttpServerMetricsSized(const xHttpServer *server, xHttpMetrics *out, size_t size) {
    xHttpMetrics sum = {.struct_size = sizeof sum};
    for (int i = 0; i < server->nworkers; i++) {
        const xHttpCounters *c = &server->workers[i].ctx.counters;
        const xNetCounters *n = &server->workers[i].ctx.net.counters;
        for (int p = 0; p < XHTTP_METRIC_PROTOCOLS; p++)
            for (int k = 0; k < XHTTP_METRIC_STATUS_CLASSES; k++)
                sum.requests[p][k] += xCounterRead(&c->requests[p][k]);
        sum.http2_streams += xCounterRead(&c->http2_streams);
        /* closed first, with an acquire: every close it counts was a connection
         * whose accept the load of accepted then sees, so open never goes negative */
        uint64_t closed = xCounterReadAcquire(&n->closed);
        uint64_t accepted = xCounterRead(&n->accepted);
        sum.connections_open += accepted - closed;
        sum.connections_accepted += accepted;
        sum.bytes_in += xCounterRead(&n->bytes_in);
        sum.bytes_out += xCounterRead(&n->bytes_out);
        sum.tls_handshakes += xCounterRead(&n->tls_handshakes);
        sum.tls_failures += xCounterRead(&n->tls_failures);
    }
    xSizedExport(out, size, &sum, sizeof sum);
}

static void on_metrics(xHttpRequest *req, xHttpResponse *res, void *arg) {
    xHttpServer *server = arg;
    xHttpMetrics m;
    xHttpServerMetrics(server, &m);
    xBuffer text = {0};
    if (xPrometheusFormat(&m, &text) != XOK || xMetricRegistryFormat(server->metrics, &text) != XOK) {
        xBufferFree(&text);
        xHttpResponseSetStatus(res, 500);
        xHttpResponseSend(res, NULL, 0);
        return;
    }
    xHttpResponseAddHeader(res, "Content-Type", XPROMETHEUS_CONTENT_TYPE);
    xHttpResponseSend(res, text.data, text.len);
    xBufferFree(&text);
}

xErrno xHttpServerMetricsRoute(xHttpServer *server, const char *path) {
    if (!path || path[0] != '/') return XERR_INVALID;
    char spec[1024];
    if (snprintf(spec, sizeof spec, "GET %s", path) >= (int)sizeof spec) return XERR_INVALID;
    return xHttpServerRoute(server, spec, on_metrics, server);
}

xErrno xHttpServerRequestDurations(xHttpServer *server, const double *buckets, size_t num_buckets) {
    if (server->running) return XERR_STATE;
    xErrno err = xMetricRegistryDurations(server->metrics, buckets, num_buckets);
    if (err == XOK) observe_finished(server);
    return err;
}

xErrno xHttpServerAddMetric(xHttpServer *server, const xHttpMetricOpts *opts, xHttpMetric **metric) {
    if (server->running) return XERR_STATE;
    return xMetricRegistryAdd(server->metrics, opts, metric, server->last_error, sizeof server->last_error);
}

xHttpMetricShard *xHttpServerMetricShard(xHttpServer *server, int worker) {
    return xMetricRegistryShard(server->metrics, worker);
}
