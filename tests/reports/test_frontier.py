"""The frontier summary on hand-made curves whose answers are worked out by hand."""

import math

import pytest

from megatron_scale.reports.frontier import Run, area, pareto, retention_at, summarise, table

# task 1 rises 0 -> 1 while task 0 falls 1 -> 0.2, crossing 0.5 once, between the 2nd and 3rd points
CURVE = [(0.0, 1.0), (0.4, 0.9), (0.6, 0.7), (1.0, 0.2)]


def test_retention_is_interpolated_between_the_bracketing_evaluations():
    assert retention_at(CURVE, 0.5) == pytest.approx(0.8)  # halfway from (0.4, 0.9) to (0.6, 0.7)
    assert retention_at(CURVE, 0.8) == pytest.approx(0.45)  # halfway from (0.6, 0.7) to (1.0, 0.2)
    assert retention_at(CURVE, 0.4) == pytest.approx(0.9)  # exactly on an evaluation
    assert retention_at(CURVE[:3], 0.95) is None  # never learnt that far


def test_a_curve_crossing_a_level_twice_keeps_its_best_crossing():
    # up to 0.6 at a low retention, back down (forgetting task 1 too), up again with more retention
    curve = [(0.0, 1.0), (0.6, 0.2), (0.2, 0.3), (0.8, 0.9)]
    # crossings of 0.5: first segment 1.0 + (0.2 - 1.0) * (0.5 / 0.6) = 1/3;
    # second: 0.2 + 0.1*(0.1/0.4) = 0.225; third: 0.3 + 0.6*(0.3/0.6) = 0.6
    assert retention_at(curve, 0.5) == pytest.approx(0.6)


def test_pareto_drops_dominated_points_and_ties():
    pts = [(0.2, 0.9), (0.5, 0.5), (0.4, 0.4), (0.5, 0.45), (0.9, 0.1), (0.1, 0.9)]
    assert pareto(pts) == [(0.2, 0.9), (0.5, 0.5), (0.9, 0.1)]


def test_area_is_the_union_of_rectangles_from_the_origin():
    # staircase: [0,0.2]x0.9 + [0.2,0.5]x0.5 + [0.5,0.9]x0.1 = 0.18 + 0.15 + 0.04
    assert area([(0.2, 0.9), (0.5, 0.5), (0.9, 0.1), (0.4, 0.4)]) == pytest.approx(0.37)
    assert area([(1.0, 1.0), (0.3, 0.2)]) == pytest.approx(1.0)  # the perfect method
    assert area([(1.5, -0.2)]) == 0.0  # clipped into [0, 1]^2
    assert area([]) == 0.0


def test_summarise_takes_the_best_learning_rate_per_seed_then_the_spread_over_seeds():
    slow = [(0.0, 1.0), (0.4, 0.95), (0.6, 0.9)]  # never reaches 0.8
    fast = [(0.0, 1.0), (0.9, 0.5)]  # at 0.5: 1.0 - 0.5 * (0.5 / 0.9)
    runs = [
        Run("a", 1e-4, 1, tuple(slow)), Run("a", 1e-3, 1, tuple(fast)),
        Run("a", 1e-4, 2, tuple((n, o - 0.1) for n, o in slow)), Run("a", 1e-3, 2, tuple(fast)),
        Run("b", 1e-3, 1, tuple(CURVE)),
    ]
    s = summarise(runs, [0.5, 0.8, 0.95], max_gap=math.inf)  # every bracket counts as measured here
    a = s["a"]["levels"]
    # seed 1: best of slow (0.925) and fast (0.7222); seed 2: best of slow-0.1 (0.825) and fast
    assert a[0.5].mean == pytest.approx((0.925 + 0.825) / 2) and a[0.5].n == 2
    assert (a[0.5].low, a[0.5].high) == (pytest.approx(0.825), pytest.approx(0.925))
    fast_at_08 = 1.0 - 0.5 * 0.8 / 0.9  # only the fast LR reaches 0.8
    assert a[0.8].mean == pytest.approx(fast_at_08) and a[0.8].n == 2
    assert a[0.95].n == 0 and math.isnan(a[0.95].mean) and str(a[0.95]) == "not reached"
    assert s["a"]["seeds"] == 2 and s["b"]["seeds"] == 1
    # seed 1's frontier: (0.4, 0.95), (0.6, 0.9), (0.9, 0.5), (0, 1.0)
    seed1 = 0.0 * 1.0 + 0.4 * 0.95 + 0.2 * 0.9 + 0.3 * 0.5
    assert s["a"]["area"].high == pytest.approx(seed1)
    text = table(s, [0.5, 0.8, 0.95])
    assert "| a | 2 | 0.875 [0.825, 0.925] |" in text and "not reached" in text
    # b: 0.7 + (0.2 - 0.7) * 0.35 / 0.4 at 0.95; area 0.4 * 0.9 + 0.2 * 0.7 + 0.4 * 0.2
    assert text.splitlines()[-1] == "| b | 1 | 0.800 | 0.450 | 0.263 | 0.580 |"


def test_bad_points_are_one_clear_error():
    with pytest.raises(ValueError, match="curve: every point must be"):
        retention_at([(0.1, float("nan"))], 0.5)
    with pytest.raises(ValueError, match="points: every point must be"):
        pareto([(0.1,)])
