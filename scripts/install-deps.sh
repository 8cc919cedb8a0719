#!/usr/bin/env bash
# Installs whatever building and testing xKit needs and this machine lacks:
# Debian packages with apt-get, Python packages with pip, and h2spec with
# `go install`. Does nothing (and needs no network) when all is present.
set -euo pipefail
. "$(dirname "$0")/apt-needs.sh"

# package:command-or-file that proves it is installed
needs=(
  cmake:cmake
  gcc:gcc
  make:make
  pkg-config:pkg-config
  python3:python3
  curl:curl
  wrk:wrk
  ca-certificates:/etc/ssl/certs/ca-certificates.crt
  libnghttp2-dev:/usr/include/nghttp2/nghttp2.h
  # QPACK's oracle in the fuzz harnesses (tests/fuzz/), never linked into the library
  libnghttp3-dev:/usr/include/nghttp3/nghttp3.h
  # the upstream response parser's oracle in fuzz_http1_response, never linked into the library
  libhttp-parser-dev:/usr/include/http_parser.h
  libjansson-dev:/usr/include/jansson.h
  libssl-dev:/usr/include/openssl/ssl.h
  # the upstream client's name resolution on the loop
  libc-ares-dev:/usr/include/ares.h
  zlib1g-dev:/usr/include/zlib.h
  libbrotli-dev:/usr/include/brotli/encode.h
  liburing-dev:/usr/include/liburing.h
  # xdb's Redis client (src/xdb/redis.c), linked by the library
  libhiredis-dev:/usr/include/hiredis/async.h
  # HTTP/3: QUIC from ngtcp2 with GnuTLS (src/xnet/quic/), and ngtcp2's own client for the tests
  libngtcp2-dev:/usr/include/ngtcp2/ngtcp2.h
  libngtcp2-crypto-gnutls-dev:/usr/include/ngtcp2/ngtcp2_crypto_gnutls.h
  libgnutls28-dev:/usr/include/gnutls/gnutls.h
  ngtcp2-client:gtlsclient
  # ss: the QUIC socket's receive buffer as the kernel holds it (tests/integration/test_http3_gro.py)
  iproute2:ss
  # a browser over HTTP/3 (tests/integration/test_http3_interop.py), QUIC forced on the origin
  chromium:chromium
  # nghttp3: the oracle QPACK is fuzzed and tested against (tests/, fuzz/)
  libnghttp3-dev:/usr/include/nghttp3/nghttp3.h
  openssl:openssl
  nghttp2-client:h2load
  strace:strace
  g++:c++
  clang-format-14:clang-format-14
  brotli:brotli
  debootstrap:/usr/sbin/debootstrap
  # The interop tests (tests/integration/test_interop_*.py): libraries from elsewhere on xKit's
  # loop, linked by their test programs only, and the real servers they talk to.
  libcurl4-openssl-dev:/usr/include/x86_64-linux-gnu/curl/curl.h
  libpq-dev:/usr/include/postgresql/libpq-fe.h
  postgresql:/usr/lib/postgresql
  redis-server:redis-server
  # proxies in front of the server: h2c smuggling and the PROXY protocol (tests/integration/)
  haproxy:/usr/sbin/haproxy
  nginx-light:/usr/sbin/nginx
  # libh2o, which `xkbench arena`'s h2o peer (bench/peers/h2o/arena_h2o.c) is built on (tests/bench)
  libh2o-evloop-dev:/usr/lib/x86_64-linux-gnu/pkgconfig/libh2o-evloop.pc
  # the kTLS guest (tests/integration/support/ktls_guest.py): Debian's kernel, which has the tls
  # module this machine's may lack, booted under qemu from a busybox initramfs
  qemu-system-x86:qemu-system-x86_64
  linux-image-amd64:/usr/share/doc/linux-image-amd64
  busybox-static:/usr/share/doc/busybox-static
)

install_needs install-deps "${needs[@]}"

# ngtcp2 1.x's headers and libraries (Debian bookworm-backports), unpacked beside the system's 0.x
# into build-ngtcp2-1x/root, never installed: lint.ngtcp2_1x_syntax compiles the QUIC code against
# them, make check-ngtcp2-1x builds and tests against them. Fetched again once a week.
"$(dirname "$0")/fetch-ngtcp2-1x.sh" "$(dirname "$0")/../build-ngtcp2-1x"

# h2spec, the HTTP/2 conformance suite the integration tests run, comes from
# Go; tests/integration/test_h2spec.py looks for it on PATH and in ~/go/bin.
gobin=${HOME}/go/bin
if ! command -v h2spec >/dev/null 2>&1 && [[ ! -x $gobin/h2spec ]]; then
  go=$(command -v go || true)
  [[ -n $go ]] || { [[ -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go; }
  if [[ -z $go ]]; then
    echo "install-deps: h2spec is missing and Go is not installed (not on PATH, not at" \
      "/usr/local/go/bin/go); install Go from https://go.dev/dl/ and run this again" >&2
    exit 1
  fi
  echo "installing: h2spec (go install into $gobin)"
  GOBIN=$gobin "$go" install github.com/summerwind/h2spec/cmd/h2spec@latest
fi

# The compression tests decode Brotli with the brotli package (gzip is in Python).
if ! python3 -c "import brotli" >/dev/null 2>&1; then
  echo "installing: brotli (pip, for the compression tests)"
  python3 -m pip install --quiet brotli
fi

# The TLS tests seal records by hand (tests/integration/support/tls_fixtures.py)
# with the AEADs of Python's cryptography package.
if ! python3 -c "import cryptography.hazmat.primitives.ciphers.aead" >/dev/null 2>&1; then
  echo "installing: cryptography (pip, for the TLS tests)"
  python3 -m pip install --quiet cryptography
fi

# The gRPC tests call the bench server's unary method with grpcio.
if ! python3 -c "import grpc" >/dev/null 2>&1; then
  echo "installing: grpcio (pip, for the gRPC tests)"
  python3 -m pip install --quiet grpcio
fi

# The WebSocket tests (tests/integration/test_websocket.py) drive the server
# with Python's websockets package as one of their clients.
if ! python3 -c "import websockets" >/dev/null 2>&1; then
  echo "installing: websockets (pip, for the WebSocket tests)"
  python3 -m pip install --quiet websockets
fi

# The HTTP/2 WebSocket tests (tests/integration/test_websocket_h2.py) script
# Python's h2 package, which speaks RFC 8441, as an independent client.
if ! python3 -c "import h2" >/dev/null 2>&1; then
  echo "installing: h2 (pip, for the HTTP/2 WebSocket tests)"
  python3 -m pip install --quiet h2
fi

# The HTTP/3 tests (tests/integration/test_http3.py) drive aioquic as an independent client.
if ! python3 -c "import aioquic.h3.connection" >/dev/null 2>&1; then
  echo "installing: aioquic (pip, for the HTTP/3 tests)"
  python3 -m pip install --quiet aioquic
fi

# The arena's stacks (tests/integration/test_arena_gateway.py) start each process as its compose
# file (arena/compose.*.yml) says, read with PyYAML.
if ! python3 -c "import yaml" >/dev/null 2>&1; then
  echo "installing: pyyaml (pip, for the arena's compose files)"
  python3 -m pip install --quiet pyyaml
fi

# The lint tests (tests/lint/test_python.py) check the Python with this exact ruff, the one
# ruff.toml's required-version names: other versions format some constructs differently.
RUFF_VERSION=0.17.5
if [[ $(python3 -m ruff --version 2>/dev/null) != "ruff $RUFF_VERSION" ]]; then
  echo "installing: ruff $RUFF_VERSION (pip, for the Python lint test)"
  python3 -m pip install --quiet "ruff==$RUFF_VERSION"
fi
