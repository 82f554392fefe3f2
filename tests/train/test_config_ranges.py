"""Every train.* number with a valid range is checked when the config loads, one line each."""
import pytest

from edge_jax.config import ConfigError, TrainKeys, load_config
from edge_jax.config_ranges import RANGE_HINTS, TRAIN_RANGES, range_text

CONFIG = "configs/lm.py:size=tiny"


def _outside(key, low, low_in, high, high_in):
    """Values just outside the range (and, for a float key, a non-finite one)."""
    out = [low - 1 if low_in else low] + ([float("inf")] if isinstance(getattr(TrainKeys, key), float) else [])
    if high is not None:
        out.append(high + 1 if high_in else high)
    return out


def _inside(low, low_in, high, high_in):
    return [low if low_in else low + 1e-3] + ([high if high_in else high - 1e-3] if high is not None else [])


@pytest.mark.parametrize("key", sorted(TRAIN_RANGES))
def test_a_train_number_outside_its_range_is_one_line_naming_key_value_and_range(key):
    bounds = TRAIN_RANGES[key]
    for value in _outside(key, *bounds):
        with pytest.raises(ConfigError) as e:
            load_config(CONFIG, {f"train.{key}": value})
        text = str(e.value)
        if key == "lr" and value <= 0:  # refused with steps, batch size ... as not positive
            assert text == f"train.lr must be positive, got {float(value)}"
            continue
        assert "\n" not in text and text.startswith(f"train.{key}={getattr(TrainKeys, key).__class__(value)} must ")
        assert text.endswith(range_text(*bounds) + RANGE_HINTS.get(key, ""))


@pytest.mark.parametrize("key", sorted(TRAIN_RANGES))
def test_a_train_number_on_its_edge_inside_loads(key):
    for value in _inside(*TRAIN_RANGES[key]):
        if key == "min_lr" or key == "lr":
            value = max(value, 1e-6)  # min_lr <= lr is checked on its own
        load_config(CONFIG, {f"train.{key}": value, "train.min_lr": 0.0})


@pytest.mark.parametrize("override, line", [
    ("train.warmup_steps=-5", "train.warmup_steps=-5 must be >= 0"),
    ("train.b1=1.5", "train.b1=1.5 must be in [0, 1)"),
    ("train.b2=1", "train.b2=1.0 must be in [0, 1)"),
    ("train.eps=0", "train.eps=0.0 must be > 0"),
    ("train.weight_decay=-5", "train.weight_decay=-5.0 must be >= 0"),
    ("train.lr=1e999", "train.lr=inf must be a finite number > 0"),
    ("train.clip_norm=-1", "train.clip_norm=-1.0 must be >= 0 (0: no clipping)"),
    ("train.decay_fraction=1", "train.decay_fraction=1.0 must be in [0, 1)"),
])
def test_the_line_reads_key_value_and_range(override, line):
    with pytest.raises(ConfigError) as e:
        load_config(CONFIG, [override])
    assert str(e.value) == line


def test_every_number_of_train_with_a_bound_is_covered():
    """The keys validate checks on their own (positive, >= 1, ...) plus TRAIN_RANGES are all of train.*'s numbers."""
    import dataclasses

    from edge_jax.config import TrainKeys
    numbers = {f.name for f in dataclasses.fields(TrainKeys) if isinstance(f.default, (int, float))}
    checked_elsewhere = {"steps", "grad_accum", "loss_chunk", "log_every", "eval_every", "ckpt_every",
                         "keep_ckpts", "profile_start", "profile_steps"}
    assert numbers == set(TRAIN_RANGES) | checked_elsewhere
    for key in checked_elsewhere:
        with pytest.raises(ConfigError, match=f"train.{key}"):
            load_config(CONFIG, {f"train.{key}": -1})
