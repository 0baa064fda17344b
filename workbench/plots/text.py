"""Display text in figures: every user or model string escaped, tokens made visible and short.

Plotly renders trace names, titles, tick and hover text as a small subset of HTML, so a
string from the user or the model (a token, a selector label, a segment name) is escaped
before it goes into a figure; control characters are shown as ``\\xNN``.
"""

from __future__ import annotations

import html
import re

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
ELLIPSIS = "…"


def visible(value) -> str:
    """The text with control characters written as \\xNN (not escaped)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", "" if value is None else str(value))


def escape(value) -> str:
    """Escaped display text of any value (None as empty)."""
    return html.escape(visible(value), quote=False)


def token_text(token, max_chars: int | None = None) -> str:
    """A token as display text: whitespace made visible, never empty, at most `max_chars`
    characters (the last one an ellipsis), then escaped."""
    shown = visible(token).replace("\n", "⏎").replace("\t", "⇥")
    if not shown.strip():
        shown = "␣" * max(1, len(shown))
    if max_chars is not None and len(shown) > max_chars:
        shown = shown[:max_chars - 1] + ELLIPSIS
    return html.escape(shown, quote=False)
