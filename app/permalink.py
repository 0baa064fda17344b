"""Permalinks, both ways: a view's state lives in its URL's query (run, example, budget,
selectors, signal, layer, the chosen token; the page is the URL's path), and a URL opened or followed from
another page restores it.

    link = Permalink({"run": "explorer_run", "example": "explorer_example", ...})
    link.apply()          # before the widgets: a URL that changed from outside sets their keys
    url = link.write()    # after them: their values into the URL (no rerun); the link to copy
"""

from __future__ import annotations

from urllib.parse import urlencode

import streamlit as st

LISTS = {"selectors"}  # comma-separated in the URL
FLOATS = {"budget"}
INTS = {"layer", "token"}


def _parse(name: str, text: str):
    if name in LISTS:
        return [part for part in text.split(",") if part]
    try:
        return float(text) if name in FLOATS else int(text) if name in INTS else text
    except ValueError:
        return None


def _text(name: str, value) -> str | None:
    if value is None or value == [] or value == "":
        return None
    if name in LISTS:
        return ",".join(str(v) for v in value)
    return f"{value:g}" if name in FLOATS else str(value)


class Permalink:
    """The query fields of one page and the session keys of the widgets they drive."""

    def __init__(self, fields: dict[str, str], page: str):
        self.fields, self.page = fields, page
        self.seen_key = f"{page}_url_state"  # the query this session last wrote or applied

    def asked(self) -> dict[str, str]:
        return {name: str(st.query_params[name]) for name in self.fields if name in st.query_params}

    def apply(self) -> bool:
        """Set the widgets' keys from the URL when it holds a query this session did not write (a
        link opened, or another page's link to this one); True when it did."""
        asked = self.asked()
        if not asked or asked == st.session_state.get(self.seen_key):
            return False
        for name, text in asked.items():
            value = _parse(name, text)
            if value is not None:
                st.session_state[self.fields[name]] = value
        st.session_state[self.seen_key] = asked
        return True

    def write(self, skip: tuple[str, ...] = ()) -> str:
        """The widgets' values into the URL (fields in `skip` left out); returns the link."""
        values = {}
        for name, key in self.fields.items():
            text = None if name in skip else _text(name, st.session_state.get(key))
            if text is not None:
                values[name] = text
        if values != self.asked() or set(st.query_params) - set(values):
            st.query_params.from_dict(values)
        st.session_state[self.seen_key] = values
        base = (st.context.url or f"/{self.page}").split("?")[0]
        return f"{base}?{urlencode(values, safe=',:')}"
