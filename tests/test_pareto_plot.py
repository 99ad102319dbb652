"""The front plot reads as a person expects: log axes said, labels apart, legend off the data, far limits named."""

from __future__ import annotations

import itertools

import pytest

from optimizer.solve.pareto import pareto_scenario

from .conftest import REPO

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def lora_front():
    return pareto_scenario(REPO / "scenarios/7b-lora.yaml")


@pytest.fixture(scope="module")
def lora_figure(lora_front):
    from optimizer.report.front import front_figure

    fig = front_figure(lora_front)
    fig.canvas.draw()
    return fig


def test_log_axes_say_so_and_tick_in_plain_numbers(lora_figure):
    ax = lora_figure.axes[0]
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "wall-clock hours (log scale)"
    # each axis says "log scale" exactly when it is one (the cost axis turns log only for a wide span of costs)
    assert ax.get_ylabel().startswith("total cost (USD)")
    assert ax.get_ylabel().endswith("(log scale)") == (ax.get_yscale() == "log")
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "1" in ticks and not any("10^" in t or "$" in t for t in ticks)


def test_point_labels_do_not_overlap(lora_figure, lora_front):
    ax = lora_figure.axes[0]
    renderer = lora_figure.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    points = len(lora_front.hours)
    assert points >= 8 and len(boxes) >= 2 * points / 3  # a real front, and most of its points keep their label
    assert not [(a, b) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)]


def test_legend_is_outside_the_axes_and_names_far_limits(lora_figure):
    renderer = lora_figure.canvas.get_renderer()
    legend = lora_figure.legends[0]
    assert not legend.get_window_extent(renderer).overlaps(lora_figure.axes[0].get_window_extent(renderer))
    texts = [t.get_text() for t in legend.get_texts()]
    assert "budget 500 USD (above every plan, not drawn)" in texts  # 500 USD is 2.8x the dearest plan
