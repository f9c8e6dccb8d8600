"""The attention page in a real headless browser (Debian's Chromium, driven by
Playwright: the ``browser`` fixture, tests/e2e/conftest.py): it loads, its selectors
switch the map, and what it shows is not blank."""

from __future__ import annotations

import numpy as np
import pytest

from stages.shared.inference.attention import sentence_attention
from stages.shared.inference.attention_figures import write_heatmaps, write_page
from stages.shared.inference.search import SearchSettings
from tests.unit.stages.shared.inference.test_attention import translator_for

pytestmark = pytest.mark.slow


def test_page_loads_switches_head_and_shows_a_heatmap(browser, tokenized, tmp_path):
    translator = translator_for(tokenized, "transformer")
    sentence = sentence_attention(translator, "Two dogs play in the snow.", SearchSettings(beam_size=2,
                                                                                           max_length_b=6))
    write_heatmaps(sentence, tmp_path)
    write_page(sentence, tmp_path / "index.html", "Two dogs play in the snow.", "transformer")

    page = browser.new_page(viewport={"width": 1000, "height": 900})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto((tmp_path / "index.html").as_uri())
    assert page.title() == "Attention of transformer"
    kinds = page.eval_on_selector_all("#kind option", "options => options.map(o => o.value)")
    assert kinds == ["encoder self-attention", "decoder self-attention", "cross-attention"]
    assert page.eval_on_selector_all("#head option", "options => options.length") == 4
    first = page.get_attribute("#map", "src")
    assert page.text_content("#caption") == "encoder self-attention, layer 1, head 1"

    page.select_option("#head", "3")
    assert page.text_content("#caption") == "encoder self-attention, layer 1, head 3"
    third = page.get_attribute("#map", "src")
    assert third != first and third.startswith("data:image/png;base64,")
    page.select_option("#kind", "cross-attention")
    page.select_option("#layer", "2")
    assert page.text_content("#caption") == "cross-attention, layer 2, head 3"  # the head choice is kept
    assert page.evaluate("document.getElementById('map').naturalWidth") > 100  # the image decoded
    assert not errors

    screenshot = tmp_path / "screenshot.png"
    page.screenshot(path=str(screenshot), full_page=True)
    import matplotlib.image

    pixels = matplotlib.image.imread(str(screenshot))[..., :3]
    assert pixels.std() > 0.05  # not one flat color
    # The heatmap's colors: viridis has no gray, so many pixels with unequal channels.
    colored = (np.abs(pixels[..., 0] - pixels[..., 2]) > 0.2).mean()
    assert colored > 0.05
