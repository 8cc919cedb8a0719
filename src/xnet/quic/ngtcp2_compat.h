/* ngtcp2_compat.h — the few calls and fields that differ between ngtcp2 0.x
 * (Debian 12: 0.12.1) and 1.x (Debian 13, bookworm-backports), named once so
 * the QUIC code (and bench/h3load.c) reads the same against either. The
 * switch is ngtcp2's own version macro, decided at compile time. Debian 12
 * builds the 0.x side; make test's lint.ngtcp2_1x_syntax compiles the 1.x
 * side against bookworm-backports' headers, and make check-ngtcp2-1x builds
 * and runs the HTTP/3 tests on it. */
#ifndef XNET_QUIC_NGTCP2_COMPAT_H
#define XNET_QUIC_NGTCP2_COMPAT_H

#include <ngtcp2/ngtcp2.h>

#if NGTCP2_VERSION_NUM >= 0x010000
typedef ngtcp2_ccerr xQuicCloseError;
#define xq_close_error_default ngtcp2_ccerr_default
#define xq_close_error_set_liberr ngtcp2_ccerr_set_liberr
#define xq_close_error_set_tls_alert ngtcp2_ccerr_set_tls_alert
#define xq_close_error_set_application ngtcp2_ccerr_set_application_error
#define xq_in_closing ngtcp2_conn_in_closing_period
#define xq_in_draining ngtcp2_conn_in_draining_period
#define xq_shutdown_stream(conn, id, code) ngtcp2_conn_shutdown_stream(conn, 0, id, code)
#define xq_shutdown_stream_write(conn, id, code) ngtcp2_conn_shutdown_stream_write(conn, 0, id, code)
#define xq_shutdown_stream_read(conn, id, code) ngtcp2_conn_shutdown_stream_read(conn, 0, id, code)
#define XQ_SET_ORIGINAL_DCID(params, cid) ((params).original_dcid = (cid), (params).original_dcid_present = 1)
#define XQ_HD_TOKEN(hd) ((hd)->token)
#define XQ_STREAM_DATA_EARLY NGTCP2_STREAM_DATA_FLAG_0RTT
#define XQ_HD_TOKENLEN(hd) ((hd)->tokenlen)
#define XQ_SET_TOKEN(settings, data, len, retried)                                                           \
    ((settings).token = (data), (settings).tokenlen = (len),                                                 \
     (settings).token_type = (retried) ? NGTCP2_TOKEN_TYPE_RETRY : NGTCP2_TOKEN_TYPE_NEW_TOKEN)
#else
typedef ngtcp2_connection_close_error xQuicCloseError;
#define xq_close_error_default ngtcp2_connection_close_error_default
#define xq_close_error_set_liberr ngtcp2_connection_close_error_set_transport_error_liberr
#define xq_close_error_set_tls_alert ngtcp2_connection_close_error_set_transport_error_tls_alert
#define xq_close_error_set_application ngtcp2_connection_close_error_set_application_error
#define xq_in_closing ngtcp2_conn_is_in_closing_period
#define xq_in_draining ngtcp2_conn_is_in_draining_period
#define xq_shutdown_stream ngtcp2_conn_shutdown_stream
#define xq_shutdown_stream_write ngtcp2_conn_shutdown_stream_write
#define xq_shutdown_stream_read ngtcp2_conn_shutdown_stream_read
#define XQ_SET_ORIGINAL_DCID(params, cid) ((params).original_dcid = (cid))
#define XQ_HD_TOKEN(hd) ((hd)->token.base)
#define XQ_STREAM_DATA_EARLY NGTCP2_STREAM_DATA_FLAG_EARLY
#define XQ_HD_TOKENLEN(hd) ((hd)->token.len)
#define XQ_SET_TOKEN(settings, data, len, retried) ((settings).token = (ngtcp2_vec){(uint8_t *)(data), (len)})
#endif

#endif
