"""The ``longctx`` config section (edge_jax.infer.longctx_config): its defaults, the checks that run only when a
method is set, the lengths' and positive counts' one-line errors, and the in-window check's bounds, computed here
from the tasks' shortest prompts and the training window."""
import dataclasses
import re

import numpy as np
import pytest

from edge_jax.config import ConfigError, load_config
from edge_jax.data.builders.longctx_tasks import TASKS, min_length
from edge_jax.infer.kv_baselines import KV_METHODS
from edge_jax.infer.longctx_config import INWINDOW_TASKS, LongctxKeys
from edge_jax.registry import SECTIONS

BASE = "configs/lm.py:size=tiny"
ON = {"longctx.method": "fullkv"}
CORE_METHODS = ("fullkv", "streamingllm", "snapkv", "pyramidkv")  # a paper's own method reads its own keys


def test_defaults_are_off_and_the_section_is_registered():
    keys = LongctxKeys()
    assert keys.method == "" and keys.inwindow_examples == 0 and keys.near_lengths == ()
    assert min(keys.lengths) >= 256 and max(keys.lengths) <= keys.max_input
    section = SECTIONS.get("longctx")
    assert section.keys is LongctxKeys
    fields = {f.name for f in dataclasses.fields(LongctxKeys)}
    assert section.resumable and all(k.startswith("longctx.") and k[len("longctx."):] in fields
                                     for k in section.resumable), section.resumable
    assert set(INWINDOW_TASKS) <= set(TASKS) and set(CORE_METHODS) <= set(KV_METHODS.names())


def test_without_a_method_the_lengths_are_not_checked():
    """"" switches the harness off: nothing of it runs, so lengths it could not run are no error."""
    config = load_config(BASE, {"longctx.lengths": (10, 70000), "longctx.examples": 0})
    assert tuple(config.longctx.lengths) == (10, 70000)


def test_every_core_baseline_accepts_valid_lengths():
    rng = np.random.default_rng(0)
    lengths = tuple(sorted(int(n) for n in rng.choice(np.arange(256, 4096), 3, replace=False)))
    near = (int(rng.integers(4096, 8192)),)
    for method in CORE_METHODS:
        config = load_config(BASE, {"longctx.method": method, "longctx.budget": 64, "longctx.lengths": lengths,
                                    "longctx.near_lengths": near, "longctx.max_input": 8192})
        assert tuple(config.longctx.lengths) == lengths and tuple(config.longctx.near_lengths) == near


@pytest.mark.parametrize("overrides, says", [
    ({"longctx.lengths": (255, 1024)}, r"longctx.lengths=(255, 1024) must be non-empty, each in [256, "
                                       r"longctx.max_input=65536]"),
    ({"longctx.lengths": (1024, 5000), "longctx.max_input": 4096}, "each in [256, longctx.max_input=4096]; "
                                                                   "raise max_input"),
    ({"longctx.lengths": ()}, "longctx.lengths=() must be non-empty"),
    ({"longctx.near_lengths": (2048,), "longctx.lengths": (1024, 2048)}, "not among longctx.lengths"),
    ({"longctx.near_lengths": (100,)}, "longctx.near_lengths=(100,) must each lie in [256"),
    ({"longctx.near_lengths": (70000,)}, "must each lie in [256, longctx.max_input=65536]"),
    ({"longctx.examples": 0}, "must be positive"),
    ({"longctx.answer_tokens": -1}, "must be positive"),
    ({"longctx.prefill_chunk": 0}, "must be positive"),
])
def test_bad_lengths_and_counts_are_one_line_errors(overrides, says):
    with pytest.raises(ConfigError, match=re.escape(says)) as err:
        load_config(BASE, {**ON, **overrides})
    assert "\n" not in str(err.value)


def _inwindow(seq_len, lengths, examples=2, answer=8):
    return load_config(BASE, {"data.seq_len": seq_len, "longctx.inwindow_examples": examples,
                              "longctx.inwindow_lengths": lengths, "longctx.answer_tokens": answer})


def test_inwindow_lengths_lie_between_the_shortest_prompt_and_the_window():
    """The bounds: the longest of the passkey and multikey tasks' shortest prompts, and data.seq_len less the
    answer tokens; both ends are accepted, one past either end is refused (also without a method)."""
    shortest = max(min_length("passkey"), min_length("multikey"))
    rng = np.random.default_rng(1)
    seq_len, answer = 512, int(rng.integers(2, 20))
    longest = seq_len - answer
    inside = tuple(int(n) for n in rng.integers(shortest, longest + 1, 2))
    config = _inwindow(seq_len, (shortest, *inside, longest), answer=answer)
    assert tuple(config.longctx.inwindow_lengths) == (shortest, *inside, longest)
    for bad in ((shortest - 1,), (longest + 1,), (shortest, longest + 1)):
        with pytest.raises(ConfigError, match=re.escape(f"each in [{shortest}, data.seq_len - longctx.answer_tokens "
                                                        f"= {longest}]")) as err:
            _inwindow(seq_len, bad, answer=answer)
        assert "\n" not in str(err.value)


def test_inwindow_needs_lengths_and_a_window_that_fits_them():
    shortest = max(min_length(t) for t in INWINDOW_TASKS)
    with pytest.raises(ConfigError, match=re.escape("longctx.inwindow_lengths=() (with")):
        _inwindow(512, ())
    with pytest.raises(ConfigError, match=re.escape("longctx.inwindow_examples=-1 >= 0")):
        _inwindow(512, (400,), examples=-1)
    # the tiny window (128 tokens) is shorter than any in-window prompt: every length is refused
    with pytest.raises(ConfigError, match=re.escape(f"each in [{shortest}, data.seq_len - longctx.answer_tokens "
                                                    "= 120]")):
        _inwindow(128, (shortest,))
    # the check is off without in-window examples: the same lengths are kept as they are
    assert tuple(_inwindow(128, (shortest,), examples=0).longctx.inwindow_lengths) == (shortest,)
