"""The run's end picture in JupyterLab, light and dark, in chromium: on JupyterLab Dark the
picture's legend, ticks and titles are light (its twin in light ink, which the HTML
carries and the extension's CSS shows), on JupyterLab Light the grey picture; no cluster:
a kernel draws a run's records through the end's own functions (display/final.py)."""

from __future__ import annotations

import io
import uuid

import numpy as np
from matplotlib.image import imread
from playwright.sync_api import expect

from .conftest import ARTIFACTS, write_cells
from .test_panel_store import set_theme

DRAW = """
from IPython.display import HTML, display
from dist_notebook.display.final import final_html, header_text, last_values, pictures
from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import Record
m = RunMetrics([0, 1])
m.add([Record(rank=r, step=s, time=100 + 0.04 * s, step_time=0.04, comm_time=0.01,
              samples=32.0, metrics={"loss": 2 / (1 + 0.1 * s) + 0.05 * r})
       for s in range(60) for r in (0, 1)])
summary = m.run_summary("r", "succeeded", 60)
header = header_text("themed", summary, 2.4)
grey, dark = pictures(m, summary)
display(HTML(final_html(header, grey, summary, {}, last_values(m), dark_png=dark)))
"""


def brightest_grey(png: bytes) -> float:
    """The brightest grey pixel (text and axes: the curves and bars are coloured)."""
    rgb = imread(io.BytesIO(png), format="png")[..., :3]
    grey = np.ptp(rgb, axis=2) < 0.03
    return float(rgb[grey].mean(axis=1).max())


def darkest_grey(png: bytes) -> float:
    rgb = imread(io.BytesIO(png), format="png")[..., :3]
    grey = np.ptp(rgb, axis=2) < 0.03
    return float(rgb[grey].mean(axis=1).min())


def test_the_end_picture_has_light_text_on_the_dark_theme(shared_lab, page):  # type: ignore[no-untyped-def]
    lab = shared_lab
    name = f"themed-{uuid.uuid4().hex[:8]}.ipynb"
    write_cells(lab.root / name, [DRAW])
    page.goto(lab.lab_url(f"lab/tree/{name}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(1, timeout=60_000)
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget"
        "?.sessionContext?.session?.kernel?.status === 'idle'",
        timeout=60_000,
    )
    set_theme(page, "JupyterLab Dark", light=False)
    page.evaluate("() => { void window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    picture = page.locator(".jp-OutputArea-output img.dn-final-picture")
    expect(picture).to_be_visible(timeout=60_000)
    content = "img => getComputedStyle(img).content"
    assert picture.evaluate(content).startswith('url("data:image/png;base64,')
    dark = picture.screenshot(path=str(ARTIFACTS / "final-picture-dark.png"))
    # JupyterLab Dark's page under a transparent picture: the text in light ink (#d0d0d0)
    assert darkest_grey(dark) < 0.15, "the dark theme's background shows through"
    assert brightest_grey(dark) > 0.7, "the legend and ticks read light on the dark theme"

    set_theme(page, "JupyterLab Light", light=True)
    expect(picture).to_be_visible(timeout=30_000)
    assert picture.evaluate(content) == "normal"  # the grey picture itself
    light = picture.screenshot(path=str(ARTIFACTS / "final-picture-light.png"))
    assert darkest_grey(light) < 0.6, "grey text on the white page"
