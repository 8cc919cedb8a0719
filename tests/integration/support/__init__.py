"""What the integration tests share: the server harness (harness), the raw
HTTP/2 client (h2client) and the TLS certificates, servers and clients
(tls_fixtures). Not tests themselves: CMake runs only ../test_*.py."""
