# apt-needs.sh — sourced by the install scripts (scripts/install-deps.sh,
# scripts/install-fuzz-deps.sh, bench/setup.sh). install_needs WHO NEED...
# takes "package:probe" words (a command on PATH, or an absolute path that
# proves the package is installed) and installs with apt-get the packages whose
# probe fails. Does nothing, and needs no network, when every probe passes.
# Anything it cannot do it says in one line, prefixed with WHO, and returns 1.
install_needs() {
  local who=$1 missing=() need pkg probe
  shift
  for need in "$@"; do
    pkg=${need%%:*} probe=${need#*:}
    if [[ $probe == /* ]]; then [[ -e $probe ]] || missing+=("$pkg")
    else command -v "$probe" >/dev/null 2>&1 || missing+=("$pkg"); fi
  done
  ((${#missing[@]} > 0)) || return 0
  local sudo=
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 ||
      { echo "$who: missing ${missing[*]}; run as root or install them: apt-get install ${missing[*]}" >&2; return 1; }
    sudo=sudo
  fi
  command -v apt-get >/dev/null 2>&1 ||
    { echo "$who: missing ${missing[*]} and there is no apt-get to install them with" >&2; return 1; }
  echo "$who: installing ${missing[*]}"
  $sudo apt-get update -qq ||
    { echo "$who: apt-get update failed (no network?); install by hand: apt-get install ${missing[*]}" >&2; return 1; }
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
    { echo "$who: apt-get install ${missing[*]} failed (see above)" >&2; return 1; }
}
