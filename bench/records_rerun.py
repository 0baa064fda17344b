"""Issue 44's exactness check on the committed records: the first N examples of each record under
docs/records/ diagnosed again by today's code (`diagnosis.rebuild`: the record's own example and
config) and compared with what the record holds (`compare_outcomes`: answers, flips, EM, contains
and rows recomputed equal; log-probabilities within 1e-4).

    KVWB_THREADS=1 .venv/bin/python bench/records_rerun.py explore-epic16-mk512-smollm2 ... \
        --first 5 --out /tmp/records-rerun.jsonl

One line per example as it finishes (appended to --out, which resumes: examples already there are
skipped), then one line per record.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "records"


def first_examples(record: Path, n: int) -> list[Path]:
    """The record's first n examples, by id in their natural order ("2" before "10")."""
    from workbench.runstore import natural_key

    folders = [p for p in (record / "diagnoses").iterdir() if p.is_dir()]
    return sorted(folders, key=lambda p: natural_key(p.name))[:n]


def read_done(out: Path) -> list[dict]:
    """The lines already written to `out` (a torn last line, from a stop mid-write, is dropped)."""
    lines = []
    for text in out.read_text().splitlines() if out.exists() else []:
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            continue
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records", nargs="+", help="record names under docs/records/")
    p.add_argument("--first", type=int, default=5)
    p.add_argument("--out", type=Path, required=True, help="a JSON-lines file, appended to (resumes)")
    args = p.parse_args(argv)

    from workbench.diagnosis.record import Diagnosis
    from workbench.diagnosis.rebuild import compare_outcomes, rebuild
    from workbench.models import load_model
    from workbench.threads import apply_thread_count

    apply_thread_count()
    done = {(r["record"], r["example"]) for r in read_done(args.out)}
    records = list(dict.fromkeys(args.records))  # a record named twice is checked once
    for name in records:
        record_dir = RECORDS / name
        todo = [f for f in first_examples(record_dir, args.first) if (name, f.name) not in done]
        if not todo:
            continue
        model = load_model(json.loads((record_dir / "manifest.json").read_text())["model"]["name"])
        for folder in todo:
            record = Diagnosis.load(folder)
            start = time.perf_counter()
            agreement = compare_outcomes(record, rebuild(model, record))
            line = {"record": name, "example": folder.name, "rows": agreement.rows, "same": agreement.same,
                    "only_one": agreement.only_one, "differing": len(agreement.differing),
                    "score_gap": agreement.score_gap, "scores_within": agreement.scores_within,
                    "seconds": round(time.perf_counter() - start, 1),
                    "differences": agreement.differing.astype(str).to_dict("records")}
            with args.out.open("a") as f:
                f.write(json.dumps(line) + "\n")
            print(f"{name} #{folder.name}: {agreement}", flush=True)
    lines = read_done(args.out)
    for name in records:
        mine = [r for r in lines if r["record"] == name]
        print(f"{name}: {sum(r['same'] for r in mine)} of {len(mine)} examples with every decision equal "
              f"({sum(r['rows'] for r in mine)} outcome rows); largest log-probability gap "
              f"{max((r['score_gap'] for r in mine), default=0):.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
