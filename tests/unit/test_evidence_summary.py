"""A sweep's evidence readings (issue 43.2): `summarize` averages evidence recall over the examples
with evidence in the pool, `evidence_tables` gathers each example's ranking and attention, `kvwb
summary` prints them, and the attention figure shows its data. Tiny model, a few seconds."""

import json

import pandas as pd
import pytest

from conftest import tiny_model
from workbench import cli, plots
from workbench.diagnosis import DiagnoseConfig
from workbench.experiments.evidence import evidence_recall_table, evidence_tables
from workbench.experiments.summary import summarize
from workbench.experiments.sweep import SweepConfig, run_sweep
from workbench.runstore import load_sweep

PASSAGES = ["Varek Olundi is coached by Selma Tarrow.", "Selma Tarrow was born in the city of Tressamor.",
            "Hollen Brave plays for the Quill Hawks."]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Three examples: evidence in passages 1 and 2 (in the pool), in passage 0 only (outside the
    `changed` pool: no recall), and none defined."""
    folder = tmp_path_factory.mktemp("ev")
    lines = [{"id": "in_pool", "passages": PASSAGES, "question": "Where was Varek's coach born?",
              "answers": ["Tressamor"], "evidence": [[1, 0, len(PASSAGES[1])], [2, 0, 10]]},
             {"id": "first_only", "passages": PASSAGES, "question": "Who coaches Varek?", "answers": ["Selma"],
              "evidence": [[0, 0, len(PASSAGES[0])]]},
             {"id": "none", "passages": PASSAGES, "question": "Who plays for the Quill Hawks?", "answers": ["Hollen"]}]
    data = folder / "d.jsonl"
    data.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    config = SweepConfig(dataset=f"jsonl:{data}", n=3, diagnose=DiagnoseConfig(
        selectors=("none", "full", "cacheblend", "random"), budgets=(0.2, 0.5), coin_draws=2, max_new_tokens=3,
        attribution=False))
    run_sweep(tiny_model("llama"), config, folder / "run", progress=False)
    return load_sweep(folder / "run")


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
