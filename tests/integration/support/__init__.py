"""What the integration tests share: the server harness (harness), the raw
HTTP/2 client (h2client), the TLS certificates, servers and clients
(tls_fixtures), wrk's and h2load's reports read by the bench tool's parsers
(loadgen), the lines the bench server's worker hooks write (worker_lines) and
the upstreams the proxy's tests play (upstream).
Not tests themselves: CMake runs only ../test_*.py."""
