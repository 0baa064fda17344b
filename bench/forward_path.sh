#!/usr/bin/env bash
# One timing block of bench/forward_path.py with the background study queues paused (SIGSTOP) and
# resumed on exit, whatever happens; prints the UTC window and `uptime` before and after.
#   bash bench/forward_path.sh diagnosis OLD_TREE NEW_TREE   (KVWB_THREADS=2; a warm-up unpaused, then one
#                                                             paused block of pairs, at most 630 s)
#   bash bench/forward_path.sh prefill NEW_TREE               (KVWB_THREADS=1, then 2)
#   bash bench/forward_path.sh hooks NEW_TREE                 (KVWB_THREADS=2)
#   bash bench/forward_path.sh hooks-split NEW_TREE           (KVWB_THREADS=2)
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="$HERE/../.venv/bin/python"
STUDIES="workbench.cli answerability"
trap 'pkill -CONT -f "$STUDIES"; echo "resumed $(date -u +%H:%M:%S) UTC"; echo "after: $(uptime)"' EXIT
export OMP_WAIT_POLICY=PASSIVE
echo "before: $(uptime)"
if [ "$1" = diagnosis ]; then  # forward_path.py pauses and resumes around each of its blocks
  KVWB_THREADS=2 timeout 1800 "$PY" "$HERE/forward_path.py" diagnosis --old "$2" --new "$3" --pause \
    --rounds 10 --blocks 630
  exit
fi
pkill -STOP -f "$STUDIES"
echo "paused $(date -u +%H:%M:%S) UTC"
case "$1" in
  prefill) KVWB_THREADS=1 PYTHONPATH="$2" timeout 400 "$PY" "$HERE/forward_path.py" prefill --rounds 4
           echo "after threads=1: $(uptime)"
           KVWB_THREADS=2 PYTHONPATH="$2" timeout 260 "$PY" "$HERE/forward_path.py" prefill --rounds 4 ;;
  hooks) KVWB_THREADS=2 PYTHONPATH="$2" timeout 420 "$PY" "$HERE/forward_path.py" hooks ;;
  hooks-split) KVWB_THREADS=2 PYTHONPATH="$2" timeout 420 "$PY" "$HERE/forward_path.py" hooks-split ;;
  *) echo "usage: forward_path.sh diagnosis OLD NEW | prefill NEW | hooks NEW | hooks-split NEW" >&2; exit 2 ;;
esac
