#!/usr/bin/env bash
# Chaos: repeated `moestream run`s while expert workers are SIGKILLed and restarted at random.
#
# Phase 1 (replicas): a synthetic tiny model sharded over 3 workers with --replicas 2, the
# workers started by hand on ipc sockets, RUNS runs with --workers while a loop SIGKILLs a
# random worker every KILL_EVERY..2*KILL_EVERY seconds and restarts it RESTART_AFTER seconds
# later. Every run must exit 0 with stdout and the dumped logits byte-identical to a calm
# in-process run of the same model.
# Phase 2 (local workers, one owner per expert): LOCAL_RUNS runs with --local-workers 3, each
# with one of the coordinator's workers SIGKILLed at a random moment. A run must either finish
# with the calm output (exit 0) or stop with exit 7 (an expert without a live owner) — never
# another code, never a different output — and leave no worker process and no ipc directory.
# At the end: no process started by this script (or by a coordinator) is left, and the
# coordinators' private ipc directories are all gone.
#
# usage: tests/bench/chaos.sh   (env: MS_BUILD_DIR=build RUNS=40 LOCAL_RUNS=12 N=256
#                                KILL_EVERY=1.5 RESTART_AFTER=0.3)
# Loopback only (ipc sockets in a private temporary directory). Not part of CI (about 2 min).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${MS_BUILD_DIR:-build}
RUNS=${RUNS:-40}
LOCAL_RUNS=${LOCAL_RUNS:-12}
N=${N:-256}
KILL_EVERY=${KILL_EVERY:-1.5}
RESTART_AFTER=${RESTART_AFTER:-0.3}
bin=$PWD/$B/moestream
wbin=$PWD/$B/moestream-worker
[ -x "$bin" ] && [ -x "$wbin" ] || { echo "chaos: build first ($B/moestream, $B/moestream-worker)" >&2; exit 2; }

T=$(mktemp -d /tmp/ms-chaos.XXXXXX)
mkdir -p "$T/tmp" "$T/ltmp" "$T/out"
chaos_pid=
cleanup() {
  [ -n "$chaos_pid" ] && kill "$chaos_pid" 2>/dev/null
  for i in 0 1 2; do [ -f "$T/pid$i" ] && kill -9 "$(cat "$T/pid$i")" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
fail=0
bad() { echo "chaos: FAIL: $*"; fail=1; }

prompt="The quick brown fox jumps over the lazy dog, and then it runs far away into the woods."
run_args=(--prompt "$prompt" -n "$N" --quiet --json)
# The tokens and text of a --json output (the stats differ from run to run), and its fail-overs.
tokens() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["generated_ids"], repr(j.get("text")))' "$1"; }
failovers() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stats"]["workers"]["failovers"])' "$1" 2>/dev/null || echo 0; }

"$bin" synth --out "$T/m" --preset tiny >/dev/null 2>&1 || { echo "chaos: synth failed" >&2; exit 1; }
"$bin" shard --model "$T/m" --workers 3 --replicas 2 --out "$T/p" --quiet || { echo "chaos: shard failed" >&2; exit 1; }
# The calm reference: in process, nothing killed.
"$bin" run --model "$T/m" "${run_args[@]}" --dump-logits "$T/calm.logits" >"$T/calm.json" 2>"$T/calm.err" ||
  { echo "chaos: the calm run failed: $(cat "$T/calm.err")" >&2; exit 1; }
tokens "$T/calm.json" >"$T/calm.out"

start_worker() { # i: (re)start worker i on its socket and wait for the socket to appear
  local i=$1 sock="$T/w$1.sock"
  rm -f "$sock"
  "$wbin" --pack "$T/p/worker-$i" --listen "ipc://$sock" --threads 1 --quiet 2>>"$T/worker$i.err" &
  echo $! >"$T/pid$i"
  disown $! # its SIGKILL is the point: no "Killed" job notice
  for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.05; done
  echo "chaos: worker $i did not start: $(tail -2 "$T/worker$i.err")" >&2
  return 1
}

# ---- phase 1: replicas 2 over 3 hand-started workers, one killed at a time
for i in 0 1 2; do start_worker "$i" || exit 1; done
eps="ipc://$T/w0.sock,ipc://$T/w1.sock,ipc://$T/w2.sock"
(
  # Chaos loop: SIGKILL a random worker, restart it shortly after, repeat until told to stop.
  trap 'exit 0' TERM
  k=0
  while [ ! -e "$T/stop" ]; do
    sleep "$(awk -v a="$KILL_EVERY" -v r="$RANDOM" 'BEGIN { printf "%.2f", a + a * r / 32768 }')"
    [ -e "$T/stop" ] && break
    i=$((RANDOM % 3))
    kill -9 "$(cat "$T/pid$i")" 2>/dev/null && k=$((k + 1))
    echo "$(date +%T.%N | cut -c1-12) kill worker $i" >>"$T/kills"
    sleep "$RESTART_AFTER"
    start_worker "$i" || echo "restart of worker $i failed" >>"$T/kills"
    echo "$k" >"$T/nkills"
  done
) &
chaos_pid=$!

t0=$(date +%s.%N)
ok=0
fo=0
for r in $(seq "$RUNS"); do
  TMPDIR=$T/tmp "$bin" run --model "$T/p/trunk" --workers "$eps" --worker-timeout 10 "${run_args[@]}" \
    --dump-logits "$T/out/r.logits" >"$T/out/r.json" 2>"$T/out/r.err"
  rc=$?
  tokens "$T/out/r.json" >"$T/out/r.out" 2>/dev/null
  fo=$((fo + $(failovers "$T/out/r.json")))
  if [ $rc -ne 0 ]; then
    bad "replica run $r exited $rc: $(tail -3 "$T/out/r.err")"
  elif ! cmp -s "$T/out/r.out" "$T/calm.out" || ! cmp -s "$T/out/r.logits" "$T/calm.logits"; then
    bad "replica run $r: output or logits differ from the calm run"
  else
    ok=$((ok + 1))
  fi
done
t1=$(date +%s.%N)
touch "$T/stop"
kill "$chaos_pid" 2>/dev/null
wait "$chaos_pid" 2>/dev/null
chaos_pid=
kills=$(wc -l <"$T/kills" 2>/dev/null || echo 0)
restart_fail=$(grep -c 'failed' "$T/kills" 2>/dev/null)
[ "${restart_fail:-0}" -eq 0 ] || bad "$restart_fail worker restarts failed"
printf 'chaos: phase 1 (3 workers, replicas 2): %d/%d runs identical to the calm run, %d workers SIGKILLed and restarted, %d fail-overs during runs, %.0f s\n' \
  "$ok" "$RUNS" "$kills" "$fo" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
for i in 0 1 2; do kill "$(cat "$T/pid$i")" 2>/dev/null; done
for _ in $(seq 100); do pgrep -f "$T/w" >/dev/null || break; sleep 0.05; done
rm -f "$T/pid0" "$T/pid1" "$T/pid2"
[ -z "$(ls -A "$T/tmp")" ] || bad "phase 1 left files in the coordinators' TMPDIR: $(ls "$T/tmp")"

# ---- phase 2: --local-workers 3 (one owner per expert), one worker SIGKILLed per run
ok=0
stopped=0
t0=$(date +%s.%N)
for r in $(seq "$LOCAL_RUNS"); do
  TMPDIR=$T/ltmp "$bin" run --model "$T/m" --local-workers 3 --worker-timeout 10 "${run_args[@]}" \
    --dump-logits "$T/out/l.logits" >"$T/out/l.json" 2>"$T/out/l.err" &
  cpid=$!
  sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.3 + 1.2 * r / 32768 }')"
  kids=($(pgrep -P "$cpid"))
  [ ${#kids[@]} -gt 0 ] && kill -9 "${kids[$((RANDOM % ${#kids[@]}))]}" 2>/dev/null
  wait "$cpid"
  rc=$?
  tokens "$T/out/l.json" >"$T/out/l.out" 2>/dev/null
  if [ $rc -eq 0 ]; then
    if cmp -s "$T/out/l.out" "$T/calm.out" && cmp -s "$T/out/l.logits" "$T/calm.logits"; then
      ok=$((ok + 1))
    else
      bad "local run $r exited 0 with output or logits different from the calm run"
    fi
  elif [ $rc -eq 7 ]; then
    stopped=$((stopped + 1))
    [ -s "$T/out/l.err" ] || bad "local run $r exited 7 without a message"
  else
    bad "local run $r exited $rc: $(tail -3 "$T/out/l.err")"
  fi
  left=$(pgrep -f "$T/ltmp" | tr '\n' ' ')
  [ -z "$left" ] && [ -z "$(pgrep -P "$cpid")" ] || bad "local run $r left processes: $left"
  [ -z "$(ls -A "$T/ltmp")" ] || bad "local run $r left an ipc directory: $(ls "$T/ltmp")"
done
t1=$(date +%s.%N)
printf 'chaos: phase 2 (--local-workers 3, one worker SIGKILLed per run): %d/%d identical to the calm run, %d stopped with exit 7, %.0f s\n' \
  "$ok" "$LOCAL_RUNS" "$stopped" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
grep -h 'exit\|worker' "$T/out/l.err" 2>/dev/null | tail -1 | sed 's/^/chaos: last local-run message: /'

# ---- no process of this run is left
left=$(pgrep -f "$T" | tr '\n' ' ')
[ -z "$left" ] || bad "processes left: $left"
if [ $fail -eq 0 ]; then echo "chaos: PASS"; else echo "chaos: FAILED"; fi
exit $fail
