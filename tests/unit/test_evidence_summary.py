"""A sweep's evidence readings (issue 43.2): `summarize` averages evidence recall over the examples
with evidence in the pool, `evidence_tables` gathers each example's ranking and attention, `kvwb
summary` prints them, and the attention figure shows its data. Tiny model, a few seconds."""

import pandas as pd
import pytest

from workbench import cli, plots
from workbench.experiments.evidence import evidence_recall_table, evidence_tables
from workbench.experiments.summary import summarize
from workbench.runstore import load_sweep


@pytest.fixture(scope="module")
def run(evidence_run):
    """Three examples: evidence in passages 1 and 2 (in the pool), in passage 0 only (outside the
    `changed` pool: no recall), and none defined (conftest's `evidence_run`)."""
    return load_sweep(evidence_run)


def test_recall_is_averaged_over_the_examples_with_evidence_in_the_pool(run):
    o = run.outcomes.set_index("example_id")
    assert o.loc["in_pool", "evidence_recall"].notna().all()
    assert o.loc[["first_only", "none"], "evidence_recall"].isna().all()  # no zeros that read as misses
    table = summarize(run)
    recall = evidence_recall_table(table)
    assert (recall.loc["full"] == 1.0).all() and (recall.loc["none"] == 0.0).all()
    at = table.set_index(["selector", "budget"])
    want = run.outcomes[(run.outcomes["selector"] == "cacheblend") & (run.outcomes["budget"] == 0.2)]
    assert at.loc[("cacheblend", 0.2), "evidence_recall"] == pytest.approx(want["evidence_recall"].mean())
    assert (table["n_with_evidence"] == 1).all()


def test_ranking_and_attention_are_gathered_over_examples(run):
    ranking, attention = evidence_tables(run)
    assert set(ranking["scorer"]) >= {"cacheblend"} and (ranking["n"] == 1).all()
    assert (ranking["lift"] == ranking["average_precision"] / ranking["chance"]).all()
    # attention needs evidence anywhere in the context: two examples, the first passage's included
    dense = attention[attention["cell"] == "dense"]
    assert (dense["n"] == 2).all() and len(dense) == 3  # three layers
    coin = attention[(attention["cell"] == "random") & (attention["budget"] == 0.2)]
    per_draw = pd.concat(pd.read_parquet(run.folder / "diagnoses" / f / "evidence_attention.parquet").assign(f=f)
                         for f in ("in_pool", "first_only"))
    per_draw = per_draw[(per_draw["cell"] == "random") & (per_draw["budget"] == 0.2) & (per_draw["layer"] == 0)]
    assert coin[coin["layer"] == 0]["mass_mean"].iloc[0] == pytest.approx(
        per_draw.groupby("f")["mass_mean"].mean().mean())


def test_the_attention_figure_shows_its_data(run):
    _, attention = evidence_tables(run)
    fig = plots.evidence_attention_figure(attention, 0.2)
    assert [t.name for t in fig.data][:2] == ["dense", "splice"]
    assert {"cacheblend", "random"} <= {t.name for t in fig.data} and "full" not in {t.name for t in fig.data}
    assert plots.figure_problems(fig) == []


def test_kvwb_summary_prints_the_evidence(run, capsys):
    assert cli.main(["summary", str(run.folder)]) == 0
    out = capsys.readouterr().out
    assert "Evidence recall" in out and "Average precision" in out and "attention mass on the evidence" in out
    precision = evidence_recall_table(summarize(run), "evidence_precision")
    assert precision.loc["none"].isna().all() and (precision.loc["full"] > 0).all()  # none recomputes no row
    lines = out[out.index("Evidence precision"):out.index("Average precision")].splitlines()
    printed = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}
    for selector in ("cacheblend", "full", "none"):  # the precision, not the recall, under its heading
        assert printed[selector] == "| " + " | ".join([selector, *(f"{round(v, 3):.3f}" for v in precision.loc[selector])]) + " |"
    assert "Precision over fewer than the 1 examples: none at b = 0.2: 0; none at b = 0.5: 0" in out
