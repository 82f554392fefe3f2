"""edge_jax.grid.verdicts: the paired t-test over seeds and the verdict rules."""
import math

import pytest

from edge_jax.grid import spec, verdicts


def test_paired_t_against_a_hand_computation():
    # d = [1, 2, 3]: mean 2, sd 1, t = 2 * sqrt(3) on 2 df; for 2 df the two-sided p is 1 - |t| / sqrt(t^2 + 2)
    t = 2 * math.sqrt(3)
    test = verdicts.paired_t([1.0, 2.0, 3.0])
    assert test.n == 3 and test.mean == pytest.approx(2.0)
    assert test.p == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-9)
    half = 4.302652729911275 / math.sqrt(3)          # t_{0.975, 2} * sd / sqrt(n)
    assert test.ci == pytest.approx((2 - half, 2 + half), rel=1e-9)
    assert test.verdict == "within noise"            # p = 0.074


def test_verdict_rules():
    assert verdicts.paired_t([1.0, 1.1, 0.9, 1.05]).verdict == "agree"
    assert verdicts.paired_t([-1.0, -1.1, -0.9, -1.05]).verdict == "disagree"
    assert verdicts.paired_t([1.0, -1.0, 0.5]).verdict == "within noise"
    # no spread: the seed does not change the outcome, so a nonzero difference is significant
    assert verdicts.paired_t([0.5, 0.5, 0.5]).verdict == "agree"
    assert verdicts.paired_t([-0.5, -0.5]).verdict == "disagree"
    tie = verdicts.paired_t([0.0, 0.0, 0.0])
    assert tie.verdict == "within noise" and tie.p == 1.0
    assert verdicts.paired_t([1.0]).verdict == "n/a" and verdicts.paired_t([]).verdict == "n/a"
    assert verdicts.paired_t([1.0, float("nan"), 2.0]).n == 2


def test_claimed_pairs_skip_the_papers_ties_and_unranked_cells():
    ranks = {"a": 1, "b": 1, "c": 3}
    assert verdicts.claimed_pairs(ranks, ["a", "b", "c", "d"]) == [("a", "c"), ("b", "c")]


def test_judge_signs_pairs_by_direction_and_uses_common_seeds():
    values = {"good": {0: 2.0, 1: 2.1, 2: 2.05}, "bad": {0: 3.0, 1: 3.2, 2: 3.1, 3: 0.0}}
    ranks = {"good": 1, "bad": 2}
    (lower,) = verdicts.judge(values, ranks, lower_is_better=True)
    assert lower.test.n == 3 and lower.test.mean == pytest.approx(1.05) and lower.test.verdict == "agree"
    (higher,) = verdicts.judge(values, ranks, lower_is_better=False, explanations={"good>bad": "why"})
    assert higher.test.verdict == "disagree" and higher.reason == "why"
    (same,) = verdicts.judge(values, ranks, lower_is_better=True, explanations={"good>bad": "why"})
    assert same.reason == ""                          # a reason only stands beside a disagreement
    assert verdicts.counts([lower, higher]) == {"agree": 1, "disagree": 1, "within noise": 0, "n/a": 0}
    assert verdicts.headline([lower, higher]) == "1 agree, 1 disagree, 0 within noise"


def test_judge_leaves_out_a_seed_with_nan_and_needs_two_paired_seeds():
    nan = float("nan")
    values = {"a": {0: 1.0, 1: nan, 2: 1.2, 3: 1.1}, "b": {0: 2.0, 1: 2.0, 2: 2.2, 3: 2.3}, "c": {0: 3.0, 5: 3.0}}
    pairs = {p.name: p.test for p in verdicts.judge(values, {"a": 1, "b": 2, "c": 3}, lower_is_better=True)}
    assert pairs["a>b"].n == 3 and pairs["a>b"].mean == pytest.approx(1.0667, abs=1e-4)
    assert pairs["a>c"].n == 1 and pairs["a>c"].verdict == "n/a" and pairs["a>c"].p is None
    assert verdicts.headline(list(verdicts.judge(values, {"a": 1, "b": 2, "c": 3}, True))).endswith(
        ", 2 n/a (fewer than 2 paired seeds)")


@pytest.mark.parametrize("explanations, message", [
    ({"a>zz": "x"}, "must be \"cellA>cellB\" naming two cells"),
    ({"a": "x"}, "must be \"cellA>cellB\""),
    ({"a>b": "two\nlines"}, "must be a one-line reason"),
    (["a>b"], "'explanations' must be a dict"),
])
def test_explanations_are_validated(explanations, message):
    raw = {"name": "toy", "title": "Toy", "base": "x.py:tiny", "base_overrides": {}, "cells": {"a": {}, "b": {}},
           "metric": "val_loss", "lower_is_better": True, "extra_metrics": [],
           "paper": {"metric": "acc", "higher_is_better": True, "source": "T", "values": {"a": 2.0, "b": 1.0}},
           "notes": "", "explanations": explanations}
    with pytest.raises(spec.GridSpecError, match=message):
        spec.validate_grid(raw, preset="tiny")
