"""Finding a sweep's examples: text search, outcome filters, sorting (the explorer's list)."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.errors import WorkbenchError
from workbench.experiments.find import FILTERS, find_examples


def tables():
    examples = pd.DataFrame({"example_id": ["e1", "e2", "e3", "e4"],
                             "question": ["Who coached Mira?", "Where was Varek born?", "Which came first?",
                                          "Who coached Varek?"],
                             "dense_em": [1.0, 1.0, 0.0, 1.0], "spliced_em": [0.0, 1.0, 0.0, 0.0],
                             "splice_flip": [True, False, True, True], "n_tokens": [30, 10, 20, 40]})
    rows = []
    flips = {"a": {"e1": 0, "e2": 0, "e3": 1, "e4": 0}, "b": {"e1": 1, "e2": 0, "e3": 1, "e4": 0}}
    for selector, by_example in flips.items():
        for example_id, flip in by_example.items():
            rows.append({"example_id": example_id, "selector": selector, "unit": "single", "budget": 0.2,
                         "flip": flip, "flip_strict": flip, "em": 0.0, "n_reused": 10})
    return examples, pd.DataFrame(rows)


def test_search_filters_and_sort():
    examples, outcomes = tables()
    assert find_examples(examples, text="COACHED") == ["e1", "e4"]  # case-insensitive, run order
    assert find_examples(examples, keep="splice_flips") == ["e1", "e3", "e4"]
    assert find_examples(examples, keep="em_lost") == ["e1", "e4"]
    assert find_examples(examples, sort="n_tokens", descending=True) == ["e4", "e1", "e3", "e2"]
    # the splice flips e1, e3, e4; A keeps dense's answer on e1 and e4, B only on e4
    assert find_examples(examples, outcomes, keep="a_not_b", a="a", b="b", budget=0.2) == ["e1"]
    assert find_examples(examples, outcomes, keep="a_not_b", a="b", b="a", budget=0.2) == []
    assert set(FILTERS) == {"all", "splice_flips", "em_lost", "a_not_b"}


def test_a_coin_passes_the_rescue_filter_where_any_draw_does_never_by_a_vote():
    examples, outcomes = tables()
    coin = pd.DataFrame([{"example_id": e, "selector": "random", "unit": "single", "budget": 0.2, "draw": d,
                          "flip": f, "flip_strict": f, "em": 0.0, "n_reused": 10}
                         for e, draws in {"e1": (1, 1, 0), "e2": (0, 0, 0), "e3": (1, 1, 1), "e4": (0, 0, 1)}.items()
                         for d, f in enumerate(draws)])
    outcomes = pd.concat([outcomes, coin], ignore_index=True)
    # the coin keeps dense's answer on e1 in one of three draws (a vote would say it flips)
    assert find_examples(examples, outcomes, keep="a_not_b", a="random", b="b", budget=0.2) == ["e1"]
    # the coin flips e4 in one of three draws where A keeps dense's answer (a vote would say it does not)
    assert find_examples(examples, outcomes, keep="a_not_b", a="a", b="random", budget=0.2) == ["e1", "e4"]


def test_bad_requests_say_what_is_wrong():
    examples, outcomes = tables()
    with pytest.raises(WorkbenchError, match="unknown example filter 'odd'"):
        find_examples(examples, keep="odd")
    with pytest.raises(WorkbenchError, match="needs the outcomes, A, B and a budget"):
        find_examples(examples, keep="a_not_b")
    with pytest.raises(WorkbenchError, match="no outcomes of c at budget 0.2"):
        find_examples(examples, outcomes, keep="a_not_b", a="a", b="c", budget=0.2)
    with pytest.raises(WorkbenchError, match="cannot sort by 'height'"):
        find_examples(examples, sort="height")
