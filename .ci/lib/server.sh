# shellcheck shell=bash
# The process handling that .ci/buildgrid/buildgrid.sh and .ci/buildbox/buildbox.sh share: sourced
# by both, never run. Each script starts one server in its own session (setsid) with its pid in a
# state dir, and must tell that server apart from whatever else has its pid now, watch it, report
# it and stop it, and only it; these functions had been two near-copies, so a fix to one (the
# zombie check of `alive`, say) could miss the other. What differs (how a server is installed,
# started and waited for, its options) stays in the script.
#
# The sourcing script, under `set -euo pipefail`, sets these before calling any function here:
#   server_script  its own name, the prefix of every message (buildgrid.sh)
#   server_name    the server, in `stop`'s message (BuildGrid)
#   server_noun    what `stop` says is not running (server)
#   pid_name       the state dir's pid file (bgd.pid); the state dir also holds `address`
#   marker_name    the entry of the state dir that only this state dir's server names on its
#                  command line (config.yml): a reused pid is not taken for the server
#   port_python    a Python that free_port asks for a port, or "" (then it probes random ones)
#   state_dir      the state dir, absolute (set by the script's parse_args)
# shellcheck disable=SC2154 # those variables, assigned by the sourcing script

die() {
  printf '%s: %s\n' "$server_script" "$*" >&2
  exit 1
}

# Alive and not a zombie (a server that died while we wait is our unreaped child).
alive() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  [ "${stat%% *}" != Z ]
}

# The pid in the pid file, if that process is alive and is the server of this state dir.
our_pid() {
  local pid
  [ -f "$state_dir/$pid_name" ] || return 1
  pid="$(cat "$state_dir/$pid_name")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$state_dir/$marker_name" || return 1
  printf '%s\n' "$pid"
}

port_answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A port of 127.0.0.1 nobody listens on: the kernel's pick where there is a port_python, else the
# first of 20 random ones in 20000-60000 that does not answer.
free_port() {
  local p
  if [ -n "$port_python" ]; then
    "$port_python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    return
  fi
  for p in $(shuf -i 20000-60000 -n 20); do
    port_answers "$p" || { printf '%s\n' "$p"; return 0; }
  done
  die "no free port found"
}

# A detached watcher: when the watched process exits (say a test killed before its cleanup ran),
# it stops the server's process group. It exits by itself once the server is gone.
stop_when_gone() {
  local watched="$1" server="$2"
  # shellcheck disable=SC2016 # $1..$3 are the inner bash's arguments, expanded there.
  setsid bash -c '
    while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
    if kill -0 "$2" 2>/dev/null && tr "\0" " " <"/proc/$2/cmdline" | grep -qF -- "$3"; then
      kill -TERM -- "-$2" 2>/dev/null
    fi' "${server_script%.sh}-watch" "$watched" "$server" "$state_dir/$marker_name" \
    </dev/null >/dev/null 2>&1 &
}

# SIGTERM to the server's process group, SIGKILL after 10 s; the pid file and address go.
stop() {
  local pid _
  if ! pid="$(our_pid)"; then
    rm -f "$state_dir/$pid_name" "$state_dir/address"
    printf '%s: no %s of %s is running\n' "$server_script" "$server_noun" "$state_dir" >&2
    return 0
  fi
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$state_dir/$pid_name" "$state_dir/address"
  printf '%s: stopped %s (pid %s)\n' "$server_script" "$server_name" "$pid" >&2
}

# The address if this state dir's server runs, else exit status 1.
status() {
  our_pid >/dev/null || { printf '%s: not running (%s)\n' "$server_script" "$state_dir" >&2; return 1; }
  cat "$state_dir/address"
}
