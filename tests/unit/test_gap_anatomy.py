"""What an exact-match gap is made of (experiments.gap_anatomy): lost gold, run-on, other ending."""

import pandas as pd

from workbench.experiments.gap_anatomy import anatomy_grid, anatomy_sentence, cell_anatomy, splice_anatomy

# Six examples against dense: 0 kept everything, 1 lost the gold, 2 named it and ran on,
# 3 named it and ended otherwise (a cut), 4 gained (dense wrong, the splice right), 5 named it only
# inside a longer number (RULER's substring match retrieves it, whole-word contains does not).
EXAMPLES = pd.DataFrame({
    "example_id": [0, 1, 2, 3, 4, 5],
    "dense_answer": ["42.", "17.", "9.", "Paris is the capital", "x", "4391891."],
    "spliced_answer": ["42.", "18.", "9. The grass is green.", "Paris", "7", "43918910."],
    "dense_em": [1.0, 1.0, 1.0, 1.0, 0.0, 1.0], "spliced_em": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
    "dense_retrieved": [1.0, 1.0, 1.0, 1.0, 0.0, 1.0], "spliced_retrieved": [1.0, 0.0, 1.0, 1.0, 1.0, 1.0],
    "dense_contains": [1.0, 1.0, 1.0, 1.0, 0.0, 1.0], "spliced_contains": [1.0, 0.0, 1.0, 1.0, 1.0, 0.0],
    "spliced_ran_on": [False, False, True, False, False, False],
})


def _outcomes(ran_on=None):
    """The splice (`none`) and a drawn control with two draws, cell by cell."""
    ex = EXAMPLES
    none = pd.DataFrame({"example_id": ex.example_id, "selector": "none", "budget": 0.2, "draw": pd.NA,
                         "em": ex.spliced_em, "retrieved": ex.spliced_retrieved, "contains": ex.spliced_contains,
                         "answer": ex.spliced_answer, "dense_answer": ex.dense_answer})
    coin = []
    for draw, em in ((0, [1.0, 1.0, 0.0, 1.0, 0.0, 1.0]), (1, [0.0, 1.0, 1.0, 1.0, 0.0, 1.0])):
        coin.append(pd.DataFrame({"example_id": ex.example_id, "selector": "coin:bcr", "budget": 0.2, "draw": draw,
                                  "em": em, "retrieved": [1.0, 1.0, 1.0, 1.0, 0.0, 1.0], "contains": 1.0,
                                  "answer": ["42.", "17.", "9. And on.", "Paris is the capital", "x", "4391891."],
                                  "dense_answer": ex.dense_answer}))
    out = pd.concat([none, *coin], ignore_index=True)
    if ran_on is not None:
        out["ran_on"] = ran_on
    return out


def test_the_splice_split_counts_each_kind_once():
    assert splice_anatomy(EXAMPLES) == {"lost": 4, "lost_gold": 1, "in_word": 1, "ran_on": 1, "other": 1,
                                        "gained": 1}


def test_lost_gold_answers_of_no_token_count_as_silent_and_the_sentence_says_so():
    """With the answers' token counts recorded, the lost-gold answers that ended at once are counted
    apart (`silent`), and the sentence says how many of the lost gold named nothing."""
    assert "silent" not in splice_anatomy(EXAMPLES)  # no token counts: nothing said of them
    tokens = EXAMPLES.assign(spliced_answer_tokens=0)  # every answer ended at once
    counts = splice_anatomy(tokens)
    assert counts["silent"] == counts["lost_gold"] == 1  # only a lost-gold answer counts
    assert "1 lost the gold (1 of them ended at once, naming nothing)" in anatomy_sentence(counts)
    assert "ended at once" not in anatomy_sentence(splice_anatomy(EXAMPLES.assign(spliced_answer_tokens=3)))
    cells = cell_anatomy(_outcomes().assign(answer_tokens=0), EXAMPLES).set_index("selector")
    assert (cells["silent"] == cells["lost_gold"]).all()


def test_without_whole_word_contains_a_number_glued_to_digits_counts_as_kept():
    """Runs without `contains` cannot tell a glued number apart: it lands in `other`."""
    counts = splice_anatomy(EXAMPLES.drop(columns=["dense_contains", "spliced_contains"]))
    assert counts["in_word"] == 0 and counts["other"] == 2


def test_no_retrieval_measure_no_anatomy():
    assert splice_anatomy(EXAMPLES.drop(columns="spliced_retrieved")) is None
    assert anatomy_sentence(None) == ""
    assert cell_anatomy(_outcomes().drop(columns="retrieved"), EXAMPLES).empty


def test_cells_read_the_text_rule_without_a_recorded_run_on_and_average_draws():
    table = cell_anatomy(_outcomes(), EXAMPLES).set_index("selector")
    assert table.attrs["ran_on_rule"].startswith("text")
    assert table.loc["none", ["lost", "lost_gold", "in_word", "ran_on", "other", "gained"]].tolist() == [4, 1, 1, 1, 1, 1]
    # draw 0 loses example 2 (ran on: "9. And on."); draw 1 loses example 0 (kept the gold, "42.": other)
    assert table.loc["coin:bcr", "draws"] == 2
    assert table.loc["coin:bcr", ["lost", "lost_gold", "ran_on", "other"]].tolist() == [1.0, 0.0, 0.5, 0.5]


def test_a_recorded_run_on_wins_over_the_text_rule():
    """A token-margin run-on (longer than dense's by many tokens, not a prefix) counts only when recorded."""
    recorded = [False, False, False, True, False, False] + [False] * 12
    table = cell_anatomy(_outcomes(ran_on=recorded), EXAMPLES).set_index("selector")
    assert table.attrs["ran_on_rule"] == "recorded"
    assert table.loc["none", ["ran_on", "other"]].tolist() == [1, 1]  # example 3 now, not example 2
    assert table.loc["coin:bcr", ["ran_on", "other"]].tolist() == [0.0, 1.0]


def test_the_sentence_warns_only_when_most_lost_matches_kept_the_gold():
    formatting = {"lost": 79, "lost_gold": 0, "in_word": 0, "ran_on": 79, "other": 0, "gained": 5}
    retrieval = {"lost": 61, "lost_gold": 59, "in_word": 0, "ran_on": 2, "other": 0, "gained": 7}
    glued = {"lost": 80, "lost_gold": 20, "in_word": 30, "ran_on": 19, "other": 11, "gained": 1}
    assert "Most of this EM gap is how the answer ends" in anatomy_sentence(formatting)
    assert "--measure retrieved" in anatomy_sentence(formatting)
    assert "--measure retrieved" not in anatomy_sentence(formatting, hint=False)
    assert "Most of" not in anatomy_sentence(retrieval)
    assert "59 lost the gold, 2 name it and ran on" in anatomy_sentence(retrieval)
    assert "30 name it only inside a longer word" in anatomy_sentence(glued)
    assert "Most of" not in anatomy_sentence(glued)  # 50 of 80 are damaged answers, not run-ons
    assert "loses no exact match" in anatomy_sentence({"lost": 0, "lost_gold": 0, "in_word": 0, "ran_on": 0,
                                                       "other": 0, "gained": 2})


def test_the_grid_is_selector_rows_by_budget_columns():
    grid = anatomy_grid(cell_anatomy(_outcomes(), EXAMPLES))
    assert grid.columns.tolist() == ["selector", "b=0.2"]
    assert grid.set_index("selector").loc["none", "b=0.2"] == "4: 1 / 1 / 1 / 1"
    assert grid.set_index("selector").loc["coin:bcr", "b=0.2"] == "1.0: 0.0 / 0.0 / 0.5 / 0.5"


def test_the_grid_says_how_many_of_the_lost_gold_ended_at_once_where_any_did():
    silent = anatomy_grid(cell_anatomy(_outcomes().assign(answer_tokens=0), EXAMPLES)).set_index("selector")
    assert silent.loc["none", "b=0.2"] == "4: 1 (1 ended at once) / 1 / 1 / 1"
    assert silent.loc["coin:bcr", "b=0.2"] == "1.0: 0.0 / 0.0 / 0.5 / 0.5"  # none of its lost gold: nothing said
    spoken = anatomy_grid(cell_anatomy(_outcomes().assign(answer_tokens=3), EXAMPLES)).set_index("selector")
    assert spoken.loc["none", "b=0.2"] == "4: 1 / 1 / 1 / 1"


def test_the_grid_answers_read_as_kvwb_answerability_prints_them():
    """`kvwb answerability --csv` tables carry every column the anatomy needs (10.12's kept grid):
    Gemma's niah_single at 512 loses 6 exact matches, all run-ons; SmolLM2's niah_multivalue at
    1024 loses 7, all retrievals."""
    from pathlib import Path

    grid = Path(__file__).resolve().parents[2] / "docs" / "records" / "grid-retrieved"
    single = splice_anatomy(pd.read_csv(grid / "gemma3-270m-niah_single-512.csv"))
    multivalue = splice_anatomy(pd.read_csv(grid / "smollm2-135m-niah_multivalue-1024.csv"))
    assert (single["lost"], single["lost_gold"], single["ran_on"]) == (6, 0, 6)
    assert (multivalue["lost"], multivalue["lost_gold"]) == (7, 7)
    assert "Most of this EM gap" in anatomy_sentence(single) and "Most of" not in anatomy_sentence(multivalue)
