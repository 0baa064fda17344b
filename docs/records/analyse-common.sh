# Sourced by the analyse-*.sh scripts (after they set run, done, asked, at02 and KVWB):
# `label` (a run short of its n is refused unless PARTIAL=1, then labelled partial), `contrasts_only`
# (the contrasts' markdown alone) and `em_contrasts` (--contrast per contrast of at02).
label=""
if [ "$done" -lt "$asked" ]; then
  [ "${PARTIAL:-0}" = 1 ] || { echo "$run holds $done of its $asked examples: the families are read at n = $asked (PARTIAL=1 reads it labelled partial)" >&2; exit 1; }
  label=" (PARTIAL: $done of $asked examples)"
fi
contrasts_only() {  # the contrasts' markdown alone (with --format csv they go to stderr, the table to stdout)
  $KVWB "$@" --format csv 2>&1 >/dev/null
}
em_contrasts=()
IFS=, read -ra list <<< "$at02"
for c in "${list[@]}"; do em_contrasts+=(--contrast "$c"); done
