#!/bin/bash
# 10.4's pre-registered tests on one run folder, as written there (families A and B at b = 0.2,
# exact match primary, Holm over each three; secondary: flip, f1_to_dense, dense_logprob_mean).
# usage: docs/records/tests-10.4.sh runs/study-ruler-mk512-MODEL   (partial before n = 200: descriptive only)
set -euo pipefail
RUN=$1
KVWB=${KVWB:-.venv/bin/kvwb}
A="--contrast cadence-grad:cacheblend@0.2 --contrast bcr:coin@0.2 --contrast cadence:cadence-grad@0.2"
B="--contrast prophetkv:cadence-grad@0.2 --contrast epic:cacheblend@0.2 --contrast relaxkv:prophetkv@0.2"
for measure in em flip f1_to_dense dense_logprob_mean; do
  echo "## measure: $measure$([ $measure = em ] && echo ' (primary)' || echo ' (secondary)')"
  echo "### family A"; $KVWB summary "$RUN" --measure $measure $A
  echo "### family B"; $KVWB summary "$RUN" --measure $measure $B
done
