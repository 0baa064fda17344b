"""The receiver's layout: segments tokenized on their own, laid end to end."""

import pytest
import torch

import workbench as wb
from conftest import byte_tokenizer, small_example
from workbench.layout import PromptFormat, build_layout


def test_segments_tile_the_context_and_ids_are_per_segment_tokenizations():
    tok = byte_tokenizer()
    example = small_example()
    layout = build_layout(tok, example)
    kinds = [s.kind for s in layout.segments]
    assert kinds == ["prefix", "passage", "passage", "passage", "suffix"]
    assert layout.segments[0].start == 0 and layout.segments[-1].end == layout.n_tokens
    for a, b in zip(layout.segments, layout.segments[1:]):
        assert a.end == b.start
    for seg in layout.segments:
        expected = tok(seg.text, add_special_tokens=False)["input_ids"]
        assert layout.ids[seg.start:seg.end].tolist() == expected
    assert example.passages[1] in layout.passages[1].text
    assert layout.suffix.text.endswith(PromptFormat().answer_lead)
    assert "<|im_start|>assistant" in layout.suffix.text


def test_reused_positions_are_exactly_the_passage_tokens():
    layout = build_layout(byte_tokenizer(), small_example())
    expected = [p for s in layout.passages for p in range(s.start, s.end)]
    assert layout.reused_positions.tolist() == expected
    names = layout.segment_names()
    assert names[0] == "prefix" and names[layout.passages[1].start] == "passage 2" and names[-1] == "suffix"
    assert layout.segment_ids()[layout.passages[2].start] == 2
    assert len(layout.tokens) == layout.n_tokens


def test_system_text_goes_into_the_prefix():
    example = wb.Example("s", ["Some passage."], "What?", ("x",), system="Be brief.")
    layout = build_layout(byte_tokenizer(), example)
    assert "Be brief." in layout.prefix.text


def test_tokenizer_without_chat_template_gets_a_plain_frame():
    tok = byte_tokenizer()
    tok.chat_template = None
    layout = build_layout(tok, small_example())
    assert layout.prefix.text == "User: " and "Assistant:" in layout.suffix.text


def test_too_long_context_is_refused_with_the_limit():
    with pytest.raises(wb.WorkbenchError, match="maximum of 50 positions"):
        build_layout(byte_tokenizer(), small_example(), max_positions=50)


def test_bad_examples_are_refused():
    with pytest.raises(wb.WorkbenchError, match="at least one passage"):
        wb.Example("e", [], "Q?", ())
    with pytest.raises(wb.WorkbenchError, match="passage 1 is empty"):
        wb.Example("e", ["ok", "  "], "Q?", ())


def test_layout_ids_are_int64():
    assert build_layout(byte_tokenizer(), small_example()).ids.dtype == torch.long
