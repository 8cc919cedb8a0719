#!/usr/bin/env bash
# The first step of `make bench`: installs with apt-get what building xKit and running the
# benchmarks need and this machine lacks (nothing, and no network, when all is there), and
# checks for Python 3.11 and Go. Takes the suite's options (`bench/xkbench suite`) to see
# which peers are asked for (--peers go,nginx,h2o; default go). Anything it cannot do, it says in one line.
set -uo pipefail

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
  liburing-dev:/usr/include/liburing.h
  util-linux:taskset openssl:openssl wrk:wrk nghttp2-client:h2load
  valgrind:callgrind_control
)
asked nginx && needs+=(nginx-light:/usr/sbin/nginx)
asked h2o && needs+=(h2o:h2o)

missing=()
for need in "${needs[@]}"; do
  pkg=${need%%:*} probe=${need#*:}
  if [[ $probe == /* ]]; then [[ -e $probe ]] || missing+=("$pkg")
  else command -v "$probe" >/dev/null 2>&1 || missing+=("$pkg"); fi
done

if ((${#missing[@]} > 0)); then
  sudo=
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "missing ${missing[*]}; run as root or install them: apt-get install ${missing[*]}"
    sudo=sudo
  fi
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and there is no apt-get to install them with"
  echo "make bench: installing ${missing[*]}"
  $sudo apt-get update -qq || die "apt-get update failed (no network?); install by hand: apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
    die "apt-get install ${missing[*]} failed (see above)"
fi

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  die "bench/xkbench needs Python 3.11 or newer; python3 is $(python3 -V 2>&1)"

if asked go && ! command -v go >/dev/null 2>&1 && [[ ! -x /usr/local/go/bin/go ]]; then
  die "Go is needed for the Go peers and is neither on PATH nor /usr/local/go/bin/go: install it from https://go.dev/dl/, or measure xKit alone with ARGS=\"--peers none\""
fi
exit 0
