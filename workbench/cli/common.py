"""What several commands share: the model options, comma lists, safe printing of data text."""

from __future__ import annotations

import argparse
import math
import sys
import unicodedata
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from workbench.errors import WorkbenchError, WorkbenchWarning

MODEL_HELP = ("model: 'smollm2-135m' (embedded, default), 'gemma3-270m' (embedded, under the Gemma terms), a "
              "local HF folder, or hub:ORG/NAME")
# Unicode format characters that reorder or hide text on a terminal (bidi overrides, isolates).
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


# ----------------------------------------------------------------------------- printing

def printable(text, keep_newlines: bool = False, stream=None) -> str:
    """`text` with control characters, ANSI escapes and bidi overrides written as escapes
    (`\\x1b`, `\\r`, `\\u202e`) when `stream` (default stdout) is a terminal; unchanged otherwise.

    Every data or model string the CLI prints goes through here. `keep_newlines` keeps line
    breaks (for a multi-line block such as a markdown table that embeds data)."""
    text = str(text)
    stream = sys.stdout if stream is None else stream
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if not terminal:
        return text
    return "".join(_escaped(ch) if _hidden(ch) and not (ch == "\n" and keep_newlines) else ch for ch in text)


def _hidden(ch: str) -> bool:
    return unicodedata.category(ch) == "Cc" or ch in _BIDI


def _escaped(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii")


def printable_frame(frame):
    """A DataFrame with every string cell made printable (for `to_string`)."""
    return frame.map(lambda v: printable(v) if isinstance(v, str) else v)


def say(text: str = "") -> None:
    """Print a block the CLI composed (it may embed data): line breaks kept, the rest escaped."""
    print(printable(text, keep_newlines=True))


def warn(text: str) -> None:
    """One `kvwb: warning: ...` line on stderr."""
    print(f"kvwb: warning: {printable(one_line(text), stream=sys.stderr)}", file=sys.stderr)


@contextmanager
def warnings_as_lines() -> Iterator[None]:
    """Run the block; afterwards (also when it raised) each WorkbenchWarning it gave is one
    `kvwb: warning:` line, and any other warning is shown as Python shows it."""
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", WorkbenchWarning)
            yield
    finally:
        for w in caught:
            if issubclass(w.category, WorkbenchWarning):
                warn(str(w.message))
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


# ----------------------------------------------------------------------------- comma lists

def _comma_list(kind, name: str):
    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(x.strip()) for x in str(text).split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {name}, got {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"expected at least one of {name}, got {text!r}")
        return values
    parse.__name__ = name
    return parse


def number(text: str) -> float:
    """An argparse type: a finite number (every float option takes this: nan and inf pass `< 0`
    checks and fail deep inside the work)."""
    value = float(text)  # a ValueError: argparse's "invalid number value"
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


# Upper bounds of the integer options, checked when the command line is parsed (before any model
# work): a count beyond these is a typo, and a huge one (10**20) overflowed deep inside the work.
MAX_COUNT = 1_000_000  # examples, rows, tokens, passages, draws: no run the workbench makes holds more
MAX_EXAMPLES = 10_000  # a command's examples (--n): each takes seconds, and generated data is made (and checked) whole
MAX_NEW_TOKENS = 4096  # an answer limit: the workbench's answers are a few words; the models' contexts are 8k-32k


def bounded_int(minimum: int, maximum: int | None, why: str = ""):
    """An argparse type: an integer from `minimum` to `maximum` (`why` says where the bound comes from;
    None: the option's own check, before any model work, bounds it with its reason)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1  # refused below, as the old `positive_int` refused it
        if value < minimum or (maximum is not None and value > maximum):
            bound = f" and at most {maximum:,}" if maximum is not None else ""
            reason = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}{bound}{reason}, got {text!r}")
        return value
    parse.__name__ = "integer"
    return parse


def _bounded_int_item(text: str) -> int:
    value = int(text)  # a ValueError: "expected comma-separated integers"
    if abs(value) > MAX_COUNT:
        raise ValueError(text)
    return value


floats = _comma_list(number, "numbers")
ints = _comma_list(_bounded_int_item, f"integers (each at most {MAX_COUNT:,} in size)")
names = _comma_list(str, "names")
positive_int = bounded_int(1, MAX_COUNT)  # every count option (--n, --epic-k, --workers, ...)
checked_later = bounded_int(1, None)  # a count its own check bounds with a reason (coin draws, target words / tokens)
count = bounded_int(0, MAX_COUNT)  # a count where 0 means something (--grow-max-span 0: no cap) or is refused later
example_count = bounded_int(1, MAX_EXAMPLES, "examples; a larger set is several runs")
answer_limit = bounded_int(1, MAX_NEW_TOKENS, "an answer limit; the workbench's answers are a few words")


def thread_count(text: str) -> int:
    """An argparse type: torch CPU threads, from 1 to the cores this process may use."""
    from workbench.threads import available_cores

    return bounded_int(1, available_cores(), "the cores this machine gives the process")(text)


def show(values) -> str:
    """A default tuple as the comma list a user would type."""
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


# ----------------------------------------------------------------------------- the model

def add_model_options(parser: argparse.ArgumentParser) -> None:
    """--model, --device and --dtype."""
    group = parser.add_argument_group("model")
    group.add_argument("--model", default="smollm2-135m", help=MODEL_HELP)
    group.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available, else cpu)")
    group.add_argument("--dtype", default=None,
                       help="fp32, bf16 or fp16 (default: fp32 on CPU, bf16 on CUDA)")


def load_model(args):
    """The model the options name (looked up on `workbench.models` at call time). The spec, the
    device, the dtype and KVWB_CACHE are checked there before any weights load."""
    from workbench import models

    return models.load_model(args.model, device=args.device, dtype=args.dtype)


def command_line(args) -> str:
    """The command as typed, for headers and the resume hint."""
    import shlex

    return shlex.join(["kvwb", *getattr(args, "argv", [])])


# ----------------------------------------------------------------------------- diagnose settings

def add_diagnose_options(p: argparse.ArgumentParser) -> None:
    """What every command that diagnoses examples lets the user set beyond selectors and budgets."""
    p.add_argument("--pool", choices=["changed", "all"], default="changed",
                   help="candidate rows a budget is a fraction of: 'changed' (rows computed under another "
                        "prefix: every passage after the first; default) or 'all' passage rows (BCR's convention)")
    p.add_argument("--coin-draws", type=checked_later, default=5,
                   help="draws of the coin (random), each with its own seed per example (default 5)")
    p.add_argument("--chunk-scope", choices=["span", "passage"], default="span",
                   help="chunks over the whole candidate span, as BCR (default), or within each passage")
    p.add_argument("--grow-max-span", type=count, default=64,
                   help="rows a grown region may hold at most (BCR Table 12: 64; 0 removes the cap)")
    p.add_argument("--rerotation", choices=["delta", "exact"], default="delta",
                   help="how the splice moves keys: 'delta' rotation of cached keys, as reuse systems do "
                        "(default), or 'exact' (the dense path's RoPE on pre-RoPE keys: layer 0 bit-exact)")
    p.add_argument("--epic-k", type=positive_int, default=None,
                   help="epic: recompute the first K rows of every passage in the pool, whatever the budget (EPIC's "
                        "k, at most 32 in its paper); default: the budget's rows spread evenly over the passages")
    p.add_argument("--relaxkv-context", type=number, default=None,
                   help="relaxkv: the share of passage rows, by query relevance, its repaired rows may attend to "
                        "(besides the prefix and themselves); default: the budget's share")
    p.add_argument("--densedev-norm", choices=["none", "layer"], default="none",
                   help="densedev: 'none', the raw sum over layers of ||dK||^2 + ||dV||^2 (CADENCE's DenseDev; "
                        "default), or 'layer': each layer's over the square of its mean dense row norm (K and V apart)")
    add_answer_rule_option(p)


def add_answer_rule_option(p: argparse.ArgumentParser) -> None:
    """--stop-at-newline / --no-stop-at-newline: which part of an answer is decoded and scored."""
    p.add_argument("--stop-at-newline", action=argparse.BooleanOptionalAction, default=True,
                   help="end every answer (dense's, the splice's, each cell's) at its first line break and score "
                        "that line (default); --no-stop-at-newline decodes on to --max-new-tokens or an end of turn "
                        "and scores the whole answer, as RULER scores its predictions")


# The options that set one selector's knob: (option, its default, the selector it applies to).
SELECTOR_OPTIONS = {"epic_k": ("--epic-k", None, "epic"), "relaxkv_context": ("--relaxkv-context", None, "relaxkv"),
                    "densedev_norm": ("--densedev-norm", "none", "densedev")}


def check_selector_options(args) -> None:
    """Refuse an option of one selector (`SELECTOR_OPTIONS`) given without that selector (a matched coin
    of it, `coin:epic`, counts): it would change nothing the run computes, yet be recorded as if it did."""
    from workbench.selectors import default_selectors, parse_selectors

    specs = parse_selectors(args.selectors or default_selectors(expensive=True))
    used = {spec.informed.name for spec in specs}
    for dest, (option, default, selector) in SELECTOR_OPTIONS.items():
        if getattr(args, dest, default) != default and selector not in used:
            raise WorkbenchError(f"{option} applies to the {selector} selector only, and the selectors "
                                 f"({', '.join(s.label for s in specs)}) do not include it: add {selector} to "
                                 f"--selectors or leave {option} out")


def diagnose_settings(args) -> dict:
    """The DiagnoseConfig fields `add_diagnose_options` sets."""
    check_selector_options(args)
    return {"pool": args.pool, "coin_draws": args.coin_draws, "chunk_scope": args.chunk_scope,
            "grow_max_span": args.grow_max_span or None, "rerotation": args.rerotation, "epic_k": args.epic_k,
            "relaxkv_context": args.relaxkv_context, "densedev_norm": args.densedev_norm,
            "stop_at_newline": args.stop_at_newline}


DATASET_OPTIONS = ("target_words", "max_passages", "max_passage_tokens", "instruction", "passages", "target_tokens",
                   "needle_depth", "data_seed")


def add_dataset_argument(p: argparse.ArgumentParser, default: str = "synthetic") -> None:
    """--dataset, its help listing every registered kind's spec form (`tasks.register_dataset`)."""
    from workbench.tasks import dataset_specs_help

    p.add_argument("--dataset", default=default, help=f"data set spec: {dataset_specs_help()} (default {default})")


def passages_setting(text: str) -> int | str:
    """An argparse type for --passages: a count (ruler) as an integer, a setting (hotpotqa) as written."""
    return int(text) if text.strip().isdigit() else text.strip()


def add_dataset_options(p: argparse.ArgumentParser, options=DATASET_OPTIONS) -> None:
    """The data set's own options (`tasks.spec.OPTIONS`): `options` names those the command takes."""
    helps = {
        "target_words": (checked_later, "synthetic only: pad passages with filler to about this many words in all"),
        "max_passages": (positive_int, "musique only: keep the first K retrieved passages"),
        "max_passage_tokens": (positive_int, "musique only: cut each passage to at most N tokens, at a word boundary"),
        "instruction": (str, "musique only: the receiver's instruction (the system prompt every sender shares)"),
        "passages": (passages_setting, "hotpotqa: all (default), gold (the paragraphs supporting_facts name) or "
                                       "gold+K (and K distractors drawn by --data-seed); ruler: the cached passages "
                                       "the haystack is cut into (default 5)"),
        "target_tokens": (checked_later, "ruler only: the passages' length in the model's tokens (default 1024)"),
        "needle_depth": (number, "ruler only: where the (first) needle sits, 0 (start) to 1 (end); default: spread "
                                 "evenly over the examples"),
        "data_seed": (int, "ruler: the seed that generates the examples; hotpotqa: the seed that draws gold+K's "
                           "distractors (default 0)"),
    }
    for name in options:
        kind, text = helps[name]
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=None, help=text)


def dataset_options(args) -> dict:
    """The data set options given on the command line (those left unset are left out)."""
    return {name: getattr(args, name) for name in DATASET_OPTIONS if getattr(args, name, None) is not None}


def load_example_for(args):
    """(model, the example --example names with the data set options): the example is checked
    before the model loads, then made with its tokenizer (ruler data is measured in its tokens)."""
    from workbench.tasks import check_dataset, check_example_spec, load_example

    options = dataset_options(args)
    check_example_spec(args.example)
    check_dataset(args.example, **options)
    model = load_model(args)
    return model, load_example(args.example, tokenizer=model.tokenizer, max_positions=model.max_positions, **options)
