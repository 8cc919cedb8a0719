# apt-needs.sh — sourced by the install scripts: install_needs takes
# "package:probe" words (a command on PATH, or an absolute path that proves the
# package is installed) and installs with apt-get the packages whose probe
# fails. Does nothing, and needs no network, when every probe passes.
install_needs() {
  local missing=() need pkg probe
  for need in "$@"; do
    pkg=${need%%:*} probe=${need#*:}
    if [[ $probe == /* ]]; then [[ -e $probe ]] || missing+=("$pkg")
    else command -v "$probe" >/dev/null 2>&1 || missing+=("$pkg"); fi
  done
  ((${#missing[@]} > 0)) || return 0
  local sudo=
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
