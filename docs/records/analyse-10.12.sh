#!/usr/bin/env bash
# Every reading that RESULTS 10.12's study pre-registered, in its entry's order, in one command, so
# that the write-up chooses nothing after the data are seen
# (docs/results-log/2026-12-06-10.12-smollm2-study-preregistration.md and amendment 1):
#   bash docs/records/analyse-10.12.sh RUN OTHER > /tmp/readings.md
# RUN: the study's run folder (`.venv/bin/python docs/records/keep.py restore NAME` brings a kept one back);
# OTHER: the second setting of the one test across settings (SmolLM2: study-ruler-mk512-smollm2,
# since Gemma's grid picked none). Refuses a run short of the n its command asked for (the entry:
# no family is tested on fewer than 200); PARTIAL=1 reads one anyway, labelled partial.
# KVWB names the command, as in study-10.12.sh.
set -euo pipefail
usage="usage: analyse-10.12.sh RUN OTHER" need="A1 B3"
source "$(dirname "$0")/analyse-common.sh" "$@"   # run, other, done, asked, at02, named, label, contrasts_only, em_contrasts
read -r a1 b3 <<< "$named"

out=$(mktemp)   # the readings are printed whole at the end, or not at all
trap 'rm -f "$out"' EXIT
{
echo "# 10.12's pre-registered readings of $run$label"
echo
echo "## 1. Primary: the families on retrieved @auc, Holm within each; the summary on retrieved"
echo "(its gap closed, area and rows to 0.9 x dense with intervals; evidence recall per selector and"
echo "budget; the gap anatomy of every cell)"
echo
$KVWB summary "$run" --measure retrieved --preregistered --read 10
echo
echo "## 2. Secondary, uncorrected: the families' contrasts on em at b = 0.2 (exact McNemar b / c; read the raw p)"
echo
contrasts_only summary "$run" --measure em "${em_contrasts[@]}" --read 10
echo
echo "## 3. Secondary, uncorrected (amendment 1): B3 ($b3) on whole-word contains over the budget grid"
echo
contrasts_only summary "$run" --measure contains --contrast "$b3" --read 10
echo
echo "## 4. The one test across settings: A1's ($a1) per-example area difference here against $other"
echo
contrasts_only summary "$run" --measure retrieved --contrast "$a1" --against "$other"
} > "$out"
cat "$out"
