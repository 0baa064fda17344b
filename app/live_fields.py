"""The Live page's input fields as session state: filled from a loaded example, or from a
diagnosis opened in the explorer ("Open in Live": its passages ready to edit and run again)."""

from __future__ import annotations

import re

import streamlit as st

from navigation import PAGES
from workbench.app_api import Diagnosis, Example, PromptFormat


def example_fields(example: Example, example_id: str) -> dict:
    """The Live fields (session keys) that hold `example`."""
    return {"live_passages": "\n\n".join(example.passages), "live_question": example.question,
            "live_gold": " | ".join(example.gold), "live_system": example.system or "",
            "live_all": example.scoring == "all",
            "live_lead": example.meta.get("answer_lead", PromptFormat.answer_lead),
            "live_id": re.sub(r"[^A-Za-z0-9._-]+", "-", example_id).strip("-") or "live", "live_load_error": ""}


def open_in_live(d: Diagnosis) -> None:
    """Live with `d`'s example, selectors, budgets, answer length and answer rule in its fields (no run yet)."""
    st.session_state.update(example_fields(d.example, d.example_id),
                            live_selectors=list(d.config.selectors),
                            live_budgets=", ".join(f"{b:g}" for b in d.config.budgets),
                            live_max_new=int(d.config.max_new_tokens), live_whole=not d.config.stop_at_newline,
                            live_opened_from=d.example_id)
    st.session_state.pop("live_diagnosis", None)  # the fields changed: an older result would mislead
    st.switch_page(PAGES["live"].path)
