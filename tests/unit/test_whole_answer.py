"""`stop_at_newline=False`: an answer decodes past its first line break and is scored whole (RULER's
reading of a prediction), from the stopping rule through the engine's cells to a run's manifest."""

import pytest
import torch

import workbench as wb

from conftest import small_example, tiny_model
from workbench.byte_tokenizer import byte_tokenizer
from workbench.cli.main import build_parser
from workbench.cli.run import sweep_config
from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.engine.answers import answer_cells
from workbench.engine.decode import StopRule, Walk

TOK = byte_tokenizer()
(A, NL, B, C) = (TOK(t, add_special_tokens=False)["input_ids"][0] for t in ("A", "\n", "B", "C"))


def test_the_rule_keeps_every_line_when_it_does_not_stop_at_a_newline():
    walk = Walk()
    for stop_at_newline, want in ((True, [A, NL]), (False, [A, NL, B, C])):
        rule, walk = StopRule(TOK, frozenset({0}), max_new_tokens=4, stop_at_newline=stop_at_newline), Walk()
        for token in (A, NL, B, C):
            if not rule.push(walk, token):
                break
        assert walk.generated == want
    assert rule.answer(walk).text == "A\nBC" and rule.answer(walk).raw == "A\nBC"
    assert StopRule(TOK, frozenset({0})).answer(walk).text == "A"  # the first line, under the newline stop


@pytest.fixture(scope="module")
def ctx():
    return wb.build_context(tiny_model("llama"), small_example())


def scripted_unembed(ctx, script, only_pass=None):
    """A hook_unembed that makes the row predicting answer token j pick `script[j]` (by its absolute
    position: the suffix's last row predicts token 0), on passes named `only_pass` (every pass: None)."""
    first = ctx.layout.n_tokens - 1  # the context, then the suffix: the last suffix row's position

    def hook(logits, hook):
        if only_pass is not None and hook.pass_name != only_pass:
            return None
        j = hook.positions - first  # [cell, row]
        for k, token in enumerate(script):
            logits[..., token] += 1e4 * (j == k).to(logits.dtype)
        return logits
    return {"hook_unembed": hook}


@pytest.mark.parametrize("stop_at_newline, text, tokens", [(True, "A", (A, NL)), (False, "A\nBC", (A, NL, B, C))])
def test_the_engines_cells_decode_past_the_line_break_when_asked(ctx, stop_at_newline, text, tokens):
    (cell,) = answer_cells(ctx.model, ctx.spliced, ctx.layout.ids, [torch.empty(0, dtype=torch.long)],
                           ctx.suffix_ids, None, 4, hooks=scripted_unembed(ctx, [A, NL, B, C]),
                           stop_at_newline=stop_at_newline)
    assert cell.answer.text == text and cell.answer.token_ids == tokens


def test_a_diagnosis_asks_every_decode_for_its_stop_rule(ctx, monkeypatch):
    import workbench.engine.answers as answers

    seen, of = [], StopRule.of
    monkeypatch.setattr(answers.StopRule, "of", classmethod(
        lambda cls, model, max_new_tokens=24, stop_at_newline=True: seen.append(stop_at_newline) or
        of(model, max_new_tokens, stop_at_newline)))
    config = DiagnoseConfig.of(selectors=("none", "cacheblend"), budgets=(0.5,), attribution=False,
                               max_new_tokens=3, stop_at_newline=False)
    d = diagnose(ctx.model, ctx.example, config, ctx=ctx)
    assert seen and not any(seen)  # dense's answer and the cells', every one without the newline stop
    assert d.config.stop_at_newline is False and d.config.to_dict()["stop_at_newline"] is False


@pytest.mark.parametrize("argv, want", [([], True), (["--no-stop-at-newline"], False), (["--stop-at-newline"], True)])
def test_kvwb_run_records_the_answer_rule_in_its_manifest_only_when_it_differs(argv, want):
    diagnose_config = sweep_config(build_parser().parse_args(["run", "--out", "x", *argv])).diagnose
    assert diagnose_config.stop_at_newline is want
    assert ("stop_at_newline" in diagnose_config.to_dict()) is (not want)  # earlier manifests read as written


def test_both_rules_recompute_the_same_rows_and_differ_only_in_the_answers_they_score(ctx):
    """The signals' decisions (CADENCE's answer, BCR's draft) do not follow the answer rule, so a record
    scored whole is paired cell for cell with its first-line twin; here the cells' answers (a scripted
    line break, through the hooks diagnose runs on every cell) are what differs."""
    selectors, budgets = ("none", "cacheblend", "cadence-grad", "bcr", "coin:bcr"), (0.3, 0.6)
    made = {rule: diagnose(ctx.model, ctx.example, DiagnoseConfig.of(
        selectors=selectors, budgets=budgets, attribution=False, max_new_tokens=4, stop_at_newline=rule),
        ctx=ctx, hooks=scripted_unembed(ctx, [A, NL, B, C]), progress=False) for rule in (True, False)}
    first, whole = made[True], made[False]
    for selector in selectors[1:]:
        for b in budgets:
            assert first.picks(selector, b) == whole.picks(selector, b), (selector, b)
    answers = {rule: set(d.tables["outcomes"]["answer"]) for rule, d in made.items()}
    assert answers == {True: {"A"}, False: {"A\nBC"}}
    assert first.answers.spliced.text == "A" and whole.answers.spliced.text == "A\nBC"
    assert first.answers.dense.text == whole.answers.dense.text.split("\n")[0]  # dense: unhooked, the model's own


def newline_prone_model():
    """A tiny model of its own whose unembedding makes a line break win wherever the third token of its
    first synthetic example's dense answer would: answers that go on past a newline."""
    from workbench.experiments.answerability import answerability

    model = tiny_model("llama")
    before = answerability(model, "synthetic", 1, max_new_tokens=8, progress=False)
    third = TOK(before["dense_answer"][0], add_special_tokens=False)["input_ids"][2]
    with torch.no_grad():
        weight = model.hf.get_output_embeddings().weight
        weight[NL] = weight[third] * 1.05
    return model


def test_answerability_reads_whole_answers_whose_first_lines_are_the_default_answers(tmp_path):
    from workbench.experiments.answer_lines import first_line
    from workbench.experiments.answerability import answerability

    model = newline_prone_model()
    first, whole = (answerability(model, "synthetic", 3, max_new_tokens=8, progress=False, stop_at_newline=rule,
                                  checkpoint=tmp_path / f"{rule}.jsonl") for rule in (True, False))
    assert any("\n" in a for a in whole["dense_answer"]) and not any("\n" in a for a in first["dense_answer"])
    assert set(whole["answers_scored"]) == {"whole"} and "answers_scored" not in first  # the CSV says its rule
    again = answerability(model, "synthetic", 3, max_new_tokens=8, progress=False, stop_at_newline=False,
                          checkpoint=tmp_path / "False.jsonl")  # every row read back from the checkpoint
    assert again.equals(whole)
    for side in ("dense", "spliced"):
        assert [first_line(a) for a in whole[f"{side}_answer"]] == list(first[f"{side}_answer"])
        assert (whole[f"{side}_answer_tokens"] >= first[f"{side}_answer_tokens"]).all()
    assert (whole["dense_answer_tokens"] > first["dense_answer_tokens"]).any()
    with pytest.raises(wb.WorkbenchError, match="another command"):  # a checkpoint keeps its rule
        answerability(model, "synthetic", 3, max_new_tokens=8, progress=False, checkpoint=tmp_path / "False.jsonl")


def test_kvwb_answer_answerability_and_diagnose_take_the_answer_rule():
    for command in ("answerability", "diagnose", "answer"):
        assert build_parser().parse_args([command]).stop_at_newline is True
        assert build_parser().parse_args([command, "--no-stop-at-newline"]).stop_at_newline is False


def test_kvwb_answer_prints_the_whole_answer_when_asked(monkeypatch, capsys):
    from conftest import run_cli

    model = newline_prone_model()
    monkeypatch.setattr("workbench.models.load_model", lambda *a, **k: model)
    printed = {}
    for argv in ([], ["--no-stop-at-newline"]):
        assert run_cli(["answer", "--example", "synthetic#0", "--max-new-tokens", "8", *argv]) == 0
        printed[bool(argv)] = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("dense"))
    assert "\\n" in printed[True] and "\\n" not in printed[False]
