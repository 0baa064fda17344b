"""RESULTS 10.12's pick, applied by `kvwb results --table 10.12-picks` to the grid's kept CSVs: per
model and kind, nothing before every setting of that kind is measured; then the qualifying
setting with the largest gap (ties: the shorter length, then the task order; HotpotQA fewer
passages), or "none qualifies"."""

from __future__ import annotations

import pandas as pd

from workbench.results.retrieval import QUEUE, picks


def _table(dense: int, spliced: int, n: int = 30) -> pd.DataFrame:
    """n examples, `dense` of them retrieved by dense and `spliced` by the splice (a subset)."""
    d = [1.0] * dense + [0.0] * (n - dense)
    s = [1.0] * spliced + [0.0] * (n - spliced)
    return pd.DataFrame({"example_id": range(n), "n_tokens": 600, "dense_em": d, "spliced_em": s,
                         "dense_retrieved": d, "spliced_retrieved": s, "splice_flip": [a != b for a, b in zip(d, s)],
                         "spliced_ran_on": False})


class _Records:
    def __init__(self, tables: dict[str, pd.DataFrame]) -> None:
        self.tables = tables

    def csvs(self, name: str) -> dict[str, pd.DataFrame]:
        assert name == "grid-retrieved"
        return self.tables


def _row(frame: pd.DataFrame, model: str, kind: str) -> dict:
    row = frame[(frame["model"].map(str) == model) & (frame["kind"].map(str) == kind)]
    assert len(row) == 1
    return {k: str(v) for k, v in row.iloc[0].items()}


def _full(model: str, kind: str, default=(18, 18), **by_setting) -> dict[str, pd.DataFrame]:
    """Every setting of `model` and `kind` kept: `default` counts unless named in `by_setting`."""
    hotpot = kind == "HotpotQA"
    return {f"{model}-{s}": _table(*by_setting.get(s.replace("-", "_").replace("+", "p"), default))
            for m, s in QUEUE if m == model and s.startswith("hotpotqa-") == hotpot}


def test_no_pick_until_every_setting_of_the_kind_is_kept():
    tables = _full("smollm2-135m", "RULER", niah_multivalue_1024=(20, 13))
    del tables["smollm2-135m-variable_tracking-2048"]
    row = _row(picks(_Records(tables)), "SmolLM2-135M", "RULER")
    assert row["settings kept"] == "11 of 12" and row["pick"] == "not yet: 1 of 12 settings unmeasured"
    assert row["qualifying so far"] == "`niah_multivalue-1024` (+0.233)"


def test_the_largest_gap_is_picked_and_a_tie_goes_to_the_shorter_length_then_the_task_order():
    tables = _full("smollm2-135m", "RULER", niah_multikey_2048=(24, 10), niah_single_1024=(24, 10),
                   niah_multivalue_512=(20, 10), variable_tracking_512=(24, 17))
    row = _row(picks(_Records(tables)), "SmolLM2-135M", "RULER")
    assert row["pick"] == "`niah_single-1024` (gap +0.467)"  # ties with 2048's, shorter wins
    tables = _full("smollm2-135m", "RULER", niah_multikey_1024=(24, 10), niah_single_1024=(24, 10))
    assert _row(picks(_Records(tables)), "SmolLM2-135M", "RULER")["pick"] == "`niah_single-1024` (gap +0.467)"
    tables = _full("smollm2-135m", "RULER", niah_multikey_512=(24, 10), niah_single_1024=(24, 10))
    assert _row(picks(_Records(tables)), "SmolLM2-135M", "RULER")["pick"] == "`niah_multikey-512` (gap +0.467)"


def test_a_dense_rate_under_the_rule_or_a_small_gap_does_not_qualify_and_hotpotqa_is_picked_apart():
    tables = {**_full("gemma3-270m", "RULER", niah_single_512=(17, 5), niah_multikey_512=(24, 19)),
              **_full("gemma3-270m", "HotpotQA", hotpotqa_all=(20, 12), hotpotqa_gold=(20, 12))}
    frame = picks(_Records(tables))
    assert _row(frame, "Gemma 3 270M", "RULER")["pick"] == "none qualifies: not run"  # 17/30 < 0.6; 5/30 < 0.2
    assert _row(frame, "Gemma 3 270M", "HotpotQA")["pick"] == "`hotpotqa-gold` (gap +0.267)"  # fewer passages
    assert _row(frame, "SmolLM2-135M", "HotpotQA")["pick"] == "not yet: 3 of 3 settings unmeasured"
