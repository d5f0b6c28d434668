#!/usr/bin/env bash
# Install, start and stop a local BuildGrid (REAPI CAS + ActionCache) for Pants' remote cache.
#
#   .ci/buildgrid/buildgrid.sh install                     # cached venv; prints its path
#   .ci/buildgrid/buildgrid.sh start [--port N] [--state-dir DIR] [--watch-pid PID]
#                                                         # prints grpc://127.0.0.1:PORT once it answers;
#                                                         # with --watch-pid, it stops when PID exits
#   .ci/buildgrid/buildgrid.sh stop  [--state-dir DIR]     # stops the server this state dir started
#   .ci/buildgrid/buildgrid.sh status [--state-dir DIR]    # prints the address if running, else exits 1
#
# Then: PANTS_CONFIG_FILES=.ci/remote-cache.toml PANTS_REMOTE_STORE_ADDRESS=grpc://127.0.0.1:PORT \
#         ./pants package ::
#
# BuildGrid 0.9.1 (PyPI) needs CPython 3.13. `install` finds one (BUILDGRID_PYTHON313, python3.13
# on PATH, pyenv, /usr), running each candidate, as a pyenv shim can exist and still fail, and
# makes a venv under the same cache as ./pants (~/.cache/gpu_build_bootstrap/), pinned by
# constraints.txt, wheels only. It is built in a temporary directory and renamed into place under a
# lock, so an interrupted install never leaves a half-made venv.
#
# The state dir (default: $BUILDGRID_STATE_DIR or ~/.cache/gpu_build_bootstrap/buildgrid-state)
# holds config.yml, bgd.pid, bgd.log, address and cas/ (the CAS on disk). The action cache is in
# memory (lru-action-cache): a restart empties it. `stop` signals only the process group whose
# pid is in the state dir's bgd.pid and whose command line names that state dir's config.
set -euo pipefail

BUILDGRID_VERSION="0.9.1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${PANTS_BOOTSTRAP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu_build_bootstrap}"
constraints="$here/constraints.txt"
# The venv's name carries a digest of the pins: changing constraints.txt makes a new venv.
pins="$(sha256sum "$constraints" | cut -c1-12)"
venv="${cache_root}/buildgrid-${BUILDGRID_VERSION}-py313-${pins}"
# The server runs as `python -c` rather than through the venv's bin/bgd, whose shebang would name
# the temporary directory the venv was built in.
BGD_MAIN='import sys; from buildgrid.server.app.cli import cli; sys.argv[0] = "bgd"; sys.exit(cli())'

# What both server scripts share (die, alive, our_pid, port_answers, free_port, stop_when_gone,
# stop, status), told which server this is.
server_script="buildgrid.sh"
server_name="BuildGrid"
server_noun="server"
pid_name="bgd.pid"
marker_name="config.yml"
port_python="$venv/bin/python"
# shellcheck source-path=SCRIPTDIR source=../lib/server.sh
. "$here/../lib/server.sh"

find_python313() {
  local candidate
  for candidate in "${BUILDGRID_PYTHON313:-}" python3.13 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3.13 \
    /usr/bin/python3.13 /usr/local/bin/python3.13; do
    [ -n "$candidate" ] || continue
    if "$candidate" -c 'import sys, venv; assert sys.version_info[:2] == (3, 13)' >/dev/null 2>&1; then
      # The real interpreter, not a shim.
      "$candidate" -c 'import sys; print(sys.executable)'
      return 0
    fi
  done
  return 1
}

install() {
  [ -x "$venv/bin/python" ] && { printf '%s\n' "$venv"; return 0; }
  mkdir -p "$cache_root"
  exec 8>"${cache_root}/.buildgrid.lock"
  flock 8
  if [ ! -x "$venv/bin/python" ]; then
    local python tmp
    python="$(find_python313)" || die "BuildGrid ${BUILDGRID_VERSION} needs CPython 3.13, and none was found on PATH or in pyenv.
  Fix: install it (e.g. \`pyenv install 3.13\`), or point BUILDGRID_PYTHON313 at one."
    tmp="$(mktemp -d "${cache_root}/.buildgrid-venv.XXXXXX")"
    printf 'buildgrid.sh: creating a virtualenv with %s and buildgrid==%s ...\n' "$python" "$BUILDGRID_VERSION" >&2
    "$python" -m venv "$tmp" || { rm -rf "$tmp"; die "could not create a virtualenv with $python"; }
    # The machine's pip config (a global `constraint=` file, extra indexes) is not ours to use.
    if ! PIP_CONFIG_FILE=/dev/null "$tmp/bin/python" -m pip install --quiet --no-cache-dir \
      --disable-pip-version-check --only-binary=:all: -c "$constraints" \
      "buildgrid==${BUILDGRID_VERSION}" >&2; then
      rm -rf "$tmp"
      die "pip could not install buildgrid==${BUILDGRID_VERSION} (is PyPI reachable?)"
    fi
    "$tmp/bin/python" -c "$BGD_MAIN" --help >/dev/null || { rm -rf "$tmp"; die "bgd does not run in $tmp"; }
    mv -T "$tmp" "$venv"
  fi
  flock -u 8
  exec 8>&-
  printf '%s\n' "$venv"
}

state_dir="${BUILDGRID_STATE_DIR:-${cache_root}/buildgrid-state}"
port=""
watch_pid=""

parse_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --port) port="${2:?--port needs a value}"; shift 2 ;;
      --port=*) port="${1#--port=}"; shift ;;
      --state-dir) state_dir="${2:?--state-dir needs a value}"; shift 2 ;;
      --state-dir=*) state_dir="${1#--state-dir=}"; shift ;;
      --watch-pid) watch_pid="${2:?--watch-pid needs a value}"; shift 2 ;;
      --watch-pid=*) watch_pid="${1#--watch-pid=}"; shift ;;
      *) die "unknown argument: $1" ;;
    esac
  done
  mkdir -p "$state_dir"
  state_dir="$(cd "$state_dir" && pwd)"
}

start_once() {
  local the_port="$1" pid _
  sed -e "s|@ADDRESS@|127.0.0.1:${the_port}|" -e "s|@CAS_DIR@|${state_dir}/cas|" \
    "$here/config.yml.in" >"$state_dir/config.yml"
  mkdir -p "$state_dir/cas"
  # Its own session and process group (setsid), detached from our stdio, so a caller that reads our
  # output is not held open by the server; `stop` signals that group only.
  setsid "$venv/bin/python" -c "$BGD_MAIN" server start "$state_dir/config.yml" \
    </dev/null >"$state_dir/bgd.log" 2>&1 &
  pid=$!
  printf '%s\n' "$pid" >"$state_dir/bgd.pid"
  for _ in $(seq 1 600); do
    if ! alive "$pid"; then
      wait "$pid" 2>/dev/null || true
      rm -f "$state_dir/bgd.pid"
      return 1
    fi
    if port_answers "$the_port"; then
      printf 'grpc://127.0.0.1:%s\n' "$the_port" >"$state_dir/address"
      [ -z "$watch_pid" ] || stop_when_gone "$watch_pid" "$pid"
      return 0
    fi
    sleep 0.1
  done
  kill -TERM -- "-$pid" 2>/dev/null || true
  rm -f "$state_dir/bgd.pid"
  die "BuildGrid did not answer on 127.0.0.1:${the_port} within 60 s; log: $state_dir/bgd.log"
}

start() {
  local pid _ the_port
  if pid="$(our_pid)"; then
    printf 'buildgrid.sh: already running (pid %s) from %s\n' "$pid" "$state_dir" >&2
    cat "$state_dir/address"
    return 0
  fi
  install >/dev/null
  for _ in 1 2 3; do
    the_port="${port:-$(free_port)}"
    if start_once "$the_port"; then
      printf 'buildgrid.sh: BuildGrid %s (pid %s) serves instance "main" on 127.0.0.1:%s; CAS in %s\n' \
        "$BUILDGRID_VERSION" "$(cat "$state_dir/bgd.pid")" "$the_port" "$state_dir/cas" >&2
      cat "$state_dir/address"
      return 0
    fi
    # A picked port may have been taken meanwhile: try another. A given one is final.
    [ -z "$port" ] || break
  done
  tail -n 20 "$state_dir/bgd.log" >&2 || true
  die "BuildGrid exited before answering on 127.0.0.1:${the_port}; log: $state_dir/bgd.log"
}

command="${1:-}"
[ $# -gt 0 ] && shift
case "$command" in
  install) [ $# -eq 0 ] || die "install takes no arguments"; install ;;
  start) parse_args "$@"; start ;;
  stop) parse_args "$@"; stop ;;
  status) parse_args "$@"; status ;;
  *) die "usage: $0 {install|start [--port N] [--state-dir DIR] [--watch-pid PID]|stop [--state-dir DIR]|status [--state-dir DIR]}" ;;
esac
