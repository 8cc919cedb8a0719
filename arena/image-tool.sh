# Sourced by arena/build.sh, test-image.sh and base-image.sh: which image tool this machine has,
# in $tool. XK_IMAGE_TOOL=docker|podman|buildah picks one; else docker when its daemon answers,
# then podman, then buildah (only where the caller allows it: buildah builds but runs nothing).
#   pick_image_tool CALLER [buildah]
pick_image_tool() {
  tool=${XK_IMAGE_TOOL:-}
  if [[ -n $tool ]]; then
    [[ $tool != buildah || ${2:-} == buildah ]] && return 0
    echo "$1: XK_IMAGE_TOOL=buildah cannot do this: docker or podman" >&2
    exit 1
  fi
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    tool=docker
  elif command -v podman >/dev/null 2>&1; then
    tool=podman
  elif [[ ${2:-} == buildah ]] && command -v buildah >/dev/null 2>&1; then
    tool=buildah
  else
    echo "$1: no docker daemon or podman here (apt-get install podman)" >&2
    exit 1
  fi
}
