#!/usr/bin/env bash
# The first step of `make bench`: installs with apt-get what building xKit and running the
# benchmarks need and this machine lacks (nothing, and no network, when all is there), and
# checks for Python 3.11 and Go. Takes the suite's options (`bench/xkbench suite`) to see
# which peers are asked for (--peers go,nginx,h2o,haproxy; default go). Anything it cannot do, it says in one line.
set -uo pipefail
. "$(dirname "$0")/../scripts/apt-needs.sh"

die() {
  echo "make bench: $*" >&2
  exit 1
}

peers=go
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --peers=*) peers=${args[i]#--peers=} ;;
    --peers) peers=${args[i + 1]:-} ;;
  esac
done
asked() { [[ ,$peers, == *,$1,* ]]; }

# package:command-or-file that proves it is installed
needs=(
  cmake:cmake gcc:gcc make:make pkg-config:pkg-config python3:python3
  libnghttp2-dev:/usr/include/nghttp2/nghttp2.h libssl-dev:/usr/include/openssl/ssl.h
  liburing-dev:/usr/include/liburing.h libhiredis-dev:/usr/include/hiredis/async.h
  libc-ares-dev:/usr/include/ares.h
  util-linux:taskset openssl:openssl wrk:wrk nghttp2-client:h2load
  valgrind:callgrind_control
  libnghttp3-dev:/usr/include/nghttp3/nghttp3.h
)
asked nginx && needs+=(nginx-light:/usr/sbin/nginx
  # what `xkbench arena` configures nginx with, as the arena's entry is: sums in njs, Brotli twins
  libnginx-mod-http-js:/usr/lib/nginx/modules/ngx_http_js_module.so
  libnginx-mod-http-brotli-static:/usr/lib/nginx/modules/ngx_http_brotli_static_module.so)
asked h2o && needs+=(h2o:h2o
  # `xkbench arena`'s h2o is a C program on libh2o, as the arena's h2o entry is (peers/h2o/arena_h2o.c)
  libh2o-evloop-dev:/usr/lib/x86_64-linux-gnu/pkgconfig/libh2o-evloop.pc)
# `xkbench compare h3`'s peers: ngtcp2's own HTTP/3 server and Caddy
asked gtlsserver && needs+=(ngtcp2-server:gtlsserver)
asked caddy && needs+=(caddy:caddy)
# `xkbench compare proxy`'s peers: setup.sh --peers nginx,h2o,haproxy,go
asked haproxy && needs+=(haproxy:/usr/sbin/haproxy)

install_needs "make bench" "${needs[@]}" || exit 1

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  die "bench/xkbench needs Python 3.11 or newer; python3 is $(python3 -V 2>&1)"

if asked go && ! command -v go >/dev/null 2>&1 && [[ ! -x /usr/local/go/bin/go ]]; then
  die "Go is needed for the Go peers and is neither on PATH nor /usr/local/go/bin/go: install it from https://go.dev/dl/, or measure xKit alone with ARGS=\"--peers none\""
fi
exit 0
