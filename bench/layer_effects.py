"""Live's default diagnosis with and without the layer-effects table (issue 26, "work done twice").

Times, alternating in one process after a warm-up, `diagnose(..., layer_effects=False)` ("off"),
`layer_effects=True` ("on") and "off" followed by the serial `layer_effects_table` of every
selection ("serial": what `layer_effects=True` cost before it read the cells' pass). Run it with
`PYTHONPATH` on a tree from before the change too: its "on" is then the old path.

    KVWB_THREADS=1 PYTHONPATH=. .venv/bin/python bench/layer_effects.py --repeats 2
"""

import argparse
import time

import workbench as wb
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.diagnosis.layer_effects import layer_effects_table, selected_rows

# app/state.py's QUICK_SELECTORS and the Live page's defaults (app/views/live.py)
LIVE = DiagnoseConfig(selectors=("none", "full", "random", "cacheblend", "densedev", "cadence-grad", "bcr:grow"),
                      budgets=(0.1, 0.3), max_new_tokens=16, attribution=False)


def run(model, example, mode: str) -> float:
    started = time.perf_counter()
    ctx = wb.build_context(model, example, rerotation=LIVE.rerotation)
    d = diagnose(model, example, LIVE, ctx=ctx, progress=False, layer_effects=mode == "on")
    if mode == "serial":
        picks = d.tables["selections"]
        picks = picks[picks["draw"].isna() | (picks["draw"] == 0)]
        layer_effects_table(ctx, {(s, b): selected_rows(d, s, b, None if draw != draw else 0)
                                  for s, b, draw in zip(picks["selector"], picks["budget"], picks["draw"].astype(float))})
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--modes", default="off,on,serial")
    parser.add_argument("--example", default="synthetic#5")  # the Live page's first example
    args = parser.parse_args()
    model = wb.load_model("smollm2-135m", device="cpu")
    example = wb.load_example(args.example)
    modes = args.modes.split(",")
    run(model, example, "off")  # warm-up
    times = {m: [] for m in modes}
    for _ in range(args.repeats):
        for m in modes:
            times[m].append(run(model, example, m))
    for m in modes:
        print(f"{m}: " + ", ".join(f"{t:.2f}" for t in times[m]) + f" s (min {min(times[m]):.2f})")
    if "off" in times:
        for m in modes:
            print(f"{m} / off (mins): {min(times[m]) / min(times['off']):.3f}")


if __name__ == "__main__":
    main()
