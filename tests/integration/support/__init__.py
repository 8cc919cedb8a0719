"""What the integration tests share: the server harness (harness), the raw
HTTP/2 client (h2client), the TLS certificates, servers and clients
(tls_fixtures) and wrk's and h2load's reports read by the bench tool's parsers
(loadgen). Not tests themselves: CMake runs only ../test_*.py."""
