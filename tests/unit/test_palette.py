"""The palette: CIEDE2000 against Sharma, Wu and Dalal's (2005) test data, and every pair of
registered selector colours at least `MIN_DELTA_E` apart (the references too); a coin in its
selector's colour, dotted."""

from __future__ import annotations

import pytest

from workbench.plots import colors
from workbench.plots.palette import (
    AVOID, MIN_DELTA_E, PALETTE_SIZE, closest_pair, color_distance, delta_e2000, distinct_palette,
    hex_to_lab,
)
from workbench.selectors.registry import reference_selectors, registered_specs

# Table 1 of Sharma, Wu and Dalal (2005): L1, a1, b1, L2, a2, b2, ΔE00 (all 34 pairs)
SHARMA = [
    (50.0000, 2.6772, -79.7751, 50.0000, 0.0000, -82.7485, 2.0425),
    (50.0000, 3.1571, -77.2803, 50.0000, 0.0000, -82.7485, 2.8615),
    (50.0000, 2.8361, -74.0200, 50.0000, 0.0000, -82.7485, 3.4412),
    (50.0000, -1.3802, -84.2814, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, -1.1848, -84.8006, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, -0.9009, -85.5211, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, 0.0000, 0.0000, 50.0000, -1.0000, 2.0000, 2.3669),
    (50.0000, -1.0000, 2.0000, 50.0000, 0.0000, 0.0000, 2.3669),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0009, 7.1792),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0010, 7.1792),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0011, 7.2195),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0012, 7.2195),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0009, -2.4900, 4.8045),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0010, -2.4900, 4.8045),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0011, -2.4900, 4.7461),
    (50.0000, 2.5000, 0.0000, 50.0000, 0.0000, -2.5000, 4.3065),
    (50.0000, 2.5000, 0.0000, 73.0000, 25.0000, -18.0000, 27.1492),
    (50.0000, 2.5000, 0.0000, 61.0000, -5.0000, 29.0000, 22.8977),
    (50.0000, 2.5000, 0.0000, 56.0000, -27.0000, -3.0000, 31.9030),
    (50.0000, 2.5000, 0.0000, 58.0000, 24.0000, 15.0000, 19.4535),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.1736, 0.5854, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.2972, 0.0000, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 1.8634, 0.5757, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.2592, 0.3350, 1.0000),
    (60.2574, -34.0099, 36.2677, 60.4626, -34.1751, 39.4387, 1.2644),
    (63.0109, -31.0961, -5.8663, 62.8187, -29.7946, -4.0864, 1.2630),
    (61.2901, 3.7196, -5.3901, 61.4292, 2.2480, -4.9620, 1.8731),
    (35.0831, -44.1164, 3.7933, 35.0232, -40.0716, 1.5901, 1.8645),
    (22.7233, 20.0904, -46.6940, 23.0331, 14.9730, -42.5619, 2.0373),
    (36.4612, 47.8580, 18.3852, 36.2715, 50.5065, 21.2231, 1.4146),
    (90.8027, -2.0831, 1.4410, 91.1528, -1.6435, 0.0447, 1.4441),
    (90.9257, -0.5406, -0.9208, 88.6381, -0.8985, -0.7239, 1.5381),
    (6.7747, -0.2908, -2.4247, 5.8714, -0.0985, -2.2286, 0.6377),
    (2.0776, 0.0795, -1.1350, 0.9033, -0.0636, -0.5514, 0.9082),
]


@pytest.mark.parametrize("row", SHARMA, ids=[f"pair{i + 1}" for i in range(len(SHARMA))])
def test_ciede2000_matches_sharmas_test_data_both_ways(row):
    lab1, lab2, expected = row[:3], row[3:6], row[6]
    assert delta_e2000(lab1, lab2) == pytest.approx(expected, abs=1e-4)
    assert delta_e2000(lab2, lab1) == pytest.approx(expected, abs=1e-4)


def test_the_pairs_issue_45_found_too_close_are_below_the_bound():
    """The old palette's cadence-grad / prophetkv and qattn / relaxkv: what the bound rules out."""
    assert color_distance("#8c564b", "#843c39") < MIN_DELTA_E
    assert color_distance("#393b79", "#5254a3") < MIN_DELTA_E


def test_the_palette_keeps_its_stated_distance():
    palette = distinct_palette(PALETTE_SIZE)
    assert len(set(palette)) == PALETTE_SIZE
    assert closest_pair(palette)[0] >= MIN_DELTA_E, closest_pair(palette)
    assert min(color_distance(c, a) for c in palette for a in AVOID) >= MIN_DELTA_E


def test_every_pair_of_registered_selector_colours_is_far_apart():
    labels = list(registered_specs())
    assert len(labels) >= 16  # the fourteen of RESULTS 10.4 and the references
    shown = {label: colors.selector_color(label) for label in labels}
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            if a in reference_selectors() and b in reference_selectors():
                continue  # grey and black: told apart by their dashes and names
            distance = color_distance(shown[a], shown[b])
            assert distance >= MIN_DELTA_E, (a, shown[a], b, shown[b], round(distance, 2))


DARKEST = 38.0  # CIELAB L below which a thin line's hue does not show (the palette's LIGHTNESS[0])


def test_sixteen_selectors_get_sixteen_colours_each_light_enough_for_its_hue_to_show():
    """The review of a 16-selector study could not tell relay from qattn, densedev from epic nor
    cadence-grad from relaxkv: qattn, epic and oracle-patch were dark (L 37, 29, 28), and a dark
    thin line reads as dark whatever its hue."""
    labels = list(registered_specs())[:16]  # the fourteen of RESULTS 10.4 and the references
    shown = {label: colors.selector_color(label) for label in labels}
    assert len(set(shown.values())) == 16
    chromatic = [c for label, c in shown.items() if label not in reference_selectors()]
    assert min(hex_to_lab(c)[0] for c in chromatic) >= DARKEST, {s: round(hex_to_lab(c)[0]) for s, c in shown.items()}
    assert min(hex_to_lab(c)[0] for c in distinct_palette(PALETTE_SIZE)) >= DARKEST  # a plugin's too
    for a, b in (("relay", "qattn"), ("densedev", "epic"), ("cadence-grad", "relaxkv")):
        assert color_distance(shown[a], shown[b]) >= 2 * MIN_DELTA_E, (a, b)


def test_a_plugin_selector_takes_the_next_distinct_colour(monkeypatch):
    labels = colors.registered_labels()
    monkeypatch.setattr(colors, "registered_labels", lambda: (*labels, "toy-plugin"))
    plugin = colors.selector_color("toy-plugin")
    assert plugin == distinct_palette(PALETTE_SIZE)[len(labels)]
    assert min(color_distance(plugin, colors.selector_color(s)) for s in labels) >= MIN_DELTA_E


def test_a_coin_is_its_selectors_colour_dotted():
    style, coin = colors.selector_style("bcr"), colors.selector_style("coin:bcr")
    assert coin["line"]["color"] == style["line"]["color"] == coin["marker"]["color"]
    assert coin["line"].get("dash") == "dot" and "dash" not in style["line"]
    assert coin["marker"]["symbol"].endswith("-open")
