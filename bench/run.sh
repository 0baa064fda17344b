#!/usr/bin/env bash
# Regenerate the tables of docs/BENCHMARKS.md on this machine (prints markdown).
# Run on an otherwise idle machine: other processes distort small-op timings on 2 cores.
# Threads: torch's default (the core count) with idle OpenMP threads sleeping (workbench.threads);
# set KVWB_THREADS to pin another count.
set -euo pipefail
cd "$(dirname "$0")/.."
KVWB=.venv/bin/kvwb
$KVWB bench repair
echo
$KVWB bench saliency
echo
$KVWB bench signals --examples 3
echo
$KVWB bench diagnose --examples 3
echo
$KVWB bench diagnose --lengths 2048 --examples 1
echo
$KVWB bench load
echo
$KVWB bench executors --examples 6
