#!/usr/bin/env bash
# Runs a command inside a fresh memory cgroup limited to LIMIT bytes, and reports whether the
# kernel had to kill it. Usage: tests/cgroup-run.sh LIMIT_BYTES REPORT_FILE command [args...]
# Exit status: the command's; 77 when memory cgroups cannot be created here (not root, no
# controller). REPORT_FILE gets "limit=N peak=N oom_kills=N" (v1: max_usage_in_bytes).
set -u
limit=$1 report=$2
shift 2
name="moestream-$$-$RANDOM"
if [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  dir=/sys/fs/cgroup/$name
  mkdir "$dir" 2>/dev/null || exit 77
  echo "$limit" > "$dir/memory.max" || { rmdir "$dir"; exit 77; }
  echo 0 > "$dir/memory.swap.max" 2>/dev/null || true
  (echo $BASHPID > "$dir/cgroup.procs" && exec "$@")
  rc=$?
  peak=$(cat "$dir/memory.peak" 2>/dev/null || echo 0)
  kills=$(awk '/^oom_kill /{print $2}' "$dir/memory.events" 2>/dev/null)
  rmdir "$dir" 2>/dev/null
elif [ -d /sys/fs/cgroup/memory ] && mkdir "/sys/fs/cgroup/memory/$name" 2>/dev/null; then
  dir=/sys/fs/cgroup/memory/$name
  echo "$limit" > "$dir/memory.limit_in_bytes" || { rmdir "$dir"; exit 77; }
  echo "$limit" > "$dir/memory.memsw.limit_in_bytes" 2>/dev/null || true
  (echo $BASHPID > "$dir/cgroup.procs" && exec "$@")
  rc=$?
  peak=$(cat "$dir/memory.max_usage_in_bytes" 2>/dev/null || echo 0)
  kills=$(awk '/^oom_kill /{print $2}' "$dir/memory.oom_control" 2>/dev/null)
  rmdir "$dir" 2>/dev/null
else
  exit 77
fi
echo "limit=$limit peak=$peak oom_kills=${kills:-0}" > "$report"
exit $rc
