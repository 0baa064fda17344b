"""`kvwb answerability`: dense and splice answers of the first n examples, scored, with the split."""

import pandas as pd
import pytest

import workbench as wb
from conftest import tiny_model
from workbench.experiments.answerability import answerability, answerability_summary


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


def test_each_example_is_answered_from_the_dense_cache_and_the_splice(model):
    table = answerability(model, "synthetic", 3, max_new_tokens=4, progress=False)
    assert list(table["example_id"]) == [e.id for e in wb.load_dataset("synthetic", n=3)]
    for row in table.itertuples():
        example = wb.load_example(f"synthetic#{row.example_id}")
        ctx = wb.build_context(model, example)
        assert row.dense_answer == ctx.answer(ctx.dense, max_new_tokens=4)
        assert row.spliced_answer == ctx.answer(ctx.spliced, max_new_tokens=4)
        assert row.dense_em == example.score(row.dense_answer)[0] and row.n_tokens == ctx.layout.n_tokens


def test_the_summary_counts_by_hand():
    table = pd.DataFrame({"dense_em": [1.0, 1, 1, 0], "spliced_em": [1.0, 0, 0, 1], "n_tokens": [10, 12, 14, 16],
                          "splice_flip": [False, True, True, True]})
    s = answerability_summary(table)
    assert (s["n"], s["b"], s["c"]) == (4, 2, 1) and s["gap"] == pytest.approx(0.25)
    assert s["dense_em"] == 0.75 and s["flips"] == 0.75 and s["median_tokens"] == 13


def test_the_command_prints_the_split_and_writes_the_table(model, tmp_path, monkeypatch, capsys):
    from workbench.cli import main

    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: model)
    out = tmp_path / "a.csv"
    assert main(["answerability", "--n", "2", "--max-new-tokens", "3", "--csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "n = 2" in printed and "dense EM" in printed and "b / c =" in printed
    assert len(pd.read_csv(out)) == 2
    assert main(["answerability", "--dataset", "ruler:nope", "--n", "2"]) == 2  # refused before the model loads


def test_an_answer_limit_shorter_than_the_gold_is_warned(model):
    from workbench.experiments.answerability import gold_tokens
    from workbench.tasks import Example

    tok = model.tokenizer  # bytes: one token per character
    one = Example("a", ("p",), "q?", ("Paris", "Lutetia"))
    every = Example("b", ("p",), "q?", ("1234", "567"), meta={"scoring": "all"})
    assert gold_tokens(one, tok) == len(tok("Paris", add_special_tokens=False)["input_ids"])
    assert gold_tokens(every, tok) == sum(len(tok(g, add_special_tokens=False)["input_ids"]) for g in every.gold) + 1
    from workbench.errors import WorkbenchWarning

    with pytest.warns(WorkbenchWarning, match=r"3 of 3 gold answers need more than the answer limit of 1"):
        answerability(model, "synthetic", 3, max_new_tokens=1, progress=False)


def test_a_killed_command_resumes_from_its_checkpoint_to_the_same_table(model, tmp_path, monkeypatch, capsys):
    """`--csv` keeps each finished example in CSV.partial.jsonl: a command killed after two examples
    (here: the third raises) answers only the rest when run again, and writes the same CSV, byte for
    byte, as an uninterrupted run (RULER's graded multi-value task: float scores survive the file)."""
    from workbench.cli import main
    import workbench.experiments.answerability as module

    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: model)
    argv = ["answerability", "--dataset", "ruler:niah_multivalue", "--target-tokens", "400", "--n", "4",
            "--max-new-tokens", "6"]
    whole = tmp_path / "whole.csv"
    assert main([*argv, "--csv", str(whole)]) == 0
    assert not (tmp_path / "whole.csv.partial.jsonl").exists()  # gone once the table is written

    built, calls = module.build_context, []

    def dies_on_the_third(m, example, *a, **k):
        calls.append(example.id)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the machine goes away mid-example
        return built(m, example, *a, **k)

    cut = tmp_path / "cut.csv"
    monkeypatch.setattr(module, "build_context", dies_on_the_third)
    assert main([*argv, "--csv", str(cut)]) != 0  # "kvwb: interrupted", nothing half-written
    partial = tmp_path / "cut.csv.partial.jsonl"
    assert not cut.exists() and len(partial.read_text().splitlines()) == 1 + 2  # its arguments, two rows
    with open(partial, "a") as f:
        f.write('{"example_id": "torn')  # a kill mid-write leaves a torn last line
    calls.clear()
    monkeypatch.setattr(module, "build_context", lambda m, example, *a, **k: calls.append(example.id) or built(
        m, example, *a, **k))
    assert main([*argv, "--csv", str(cut)]) == 0
    assert len(calls) == 2 and "resuming from" in capsys.readouterr().out  # only the two not kept
    assert cut.read_bytes() == whole.read_bytes()
    assert not partial.exists()


def test_a_checkpoint_of_another_command_is_refused(model, tmp_path):
    from workbench.errors import WorkbenchError

    path = tmp_path / "t.csv.partial.jsonl"
    answerability(model, "synthetic", 2, max_new_tokens=3, progress=False, checkpoint=path)
    with pytest.raises(WorkbenchError, match="holds rows of another command"):
        answerability(model, "synthetic", 2, max_new_tokens=4, progress=False, checkpoint=path)
    table = answerability(model, "synthetic", 2, max_new_tokens=3, progress=False, checkpoint=path)
    assert len(table) == 2  # the same command reads its rows back


def test_the_command_names_the_splices_blank_answers(model, monkeypatch, capsys):
    from workbench.cli import main
    from workbench.experiments import blank_answers

    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: model)
    monkeypatch.setattr(blank_answers, "BLANK_SHARE", 0.0)  # named whatever its share
    assert main(["answerability", "--n", "2", "--max-new-tokens", "3"]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if "Blank answers" in s)
    assert "splice" in line and "--no-stop-at-newline" in line and "kvwb summary" not in line  # no run to read


def test_an_answer_limit_of_zero_is_refused(model):
    """An answer of no token must mean an end of turn first (blank answers, the anatomy read it so)."""
    from workbench.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match="max_new_tokens"):
        answerability(model, "synthetic", 1, max_new_tokens=0, progress=False)


def test_kvwb_answer_says_an_answer_of_no_token_ended_at_once(model, monkeypatch, capsys):
    """`kvwb answer` prints '' and says it ended at once where the splice's first token ends the turn."""
    from conftest import small_example

    from workbench import cli
    from workbench.cli import answer as answer_cli
    from workbench.context import Context
    from workbench.experiments.blank_answers import ENDED_AT_ONCE

    monkeypatch.setattr(answer_cli, "load_example_for", lambda args: (model, small_example()))
    generate = Context.generate

    def ended_on_the_splice(self, cache, *args, **kwargs):
        answer = generate(self, cache, *args, **kwargs)
        return answer if cache is not self.spliced else type(answer)(text="", raw="", token_ids=(), stopped=True)
    monkeypatch.setattr(Context, "generate", ended_on_the_splice)
    assert cli.main(["answer", "--max-new-tokens", "3"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert f"'' ({ENDED_AT_ONCE})" in lines["spliced"] and ENDED_AT_ONCE not in lines["dense"]
