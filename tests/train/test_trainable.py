"""Which params train (train.trainable) and at what learning rate (train.lr_multipliers), by path pattern.

The equivalence tests hold the optimizer to the chain edge_jax built before these keys were patterns
(``trainable in {all, memory_gate}`` and ``gate_lr``), written out by hand below: an old config upgraded
to the pattern keys must update every param bit for bit as before, so old results reproduce exactly.
"""
import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from edge_jax.config import ConfigError, upgrade_config
from edge_jax.train.optim import make_optimizer, make_schedule, param_labels, param_path, trained_count


def _tree(seed=0):
    """A param tree shaped like a decoder with a per-layer gating module (matrices, biases, a 1-D logit)."""
    rng = np.random.default_rng(seed)
    shapes = {"embed": {"embedding": (16, 8)}, "final_norm": {"scale": (8,)}}
    for i in range(2):
        shapes[f"layers_{i}"] = {
            "attn": {"q_proj": {"kernel": (8, 8)}, "o_proj": {"kernel": (8, 8)},
                     "memory_gate": {"w1": (4, 3), "b1": (3,), "w2": (3, 1), "g": (4,)}},
            "ffn": {"up": {"kernel": (8, 12)}, "down": {"kernel": (12, 8)}}, "norm": {"scale": (8,)}}
    return jax.tree_util.tree_map(lambda s: jnp.asarray(rng.normal(size=s), jnp.float32), shapes,
                                  is_leaf=lambda x: isinstance(x, tuple))


def _train_keys(**kw):
    t = ml_collections.ConfigDict(dict(steps=20, lr=2e-3, min_lr=2e-4, warmup_steps=3, schedule="cosine",
                                       decay_fraction=0.2, tail_fraction=0.1, b1=0.9, b2=0.95, eps=1e-8,
                                       weight_decay=0.1, clip_norm=1.0, trainable=".*", lr_multipliers=()))
    t.update(kw)
    return t


def old_optimizer(t, trainable: str, gate_lr: float):
    """The optimizer before path patterns (edge_jax at 8ba5545, train/optim.py), for comparison."""
    schedule = make_schedule(t)
    clip = optax.clip_by_global_norm(t.clip_norm) if t.clip_norm > 0 else optax.identity()
    matrices = lambda params: jax.tree_util.tree_map(lambda p: p.ndim > 1, params)  # noqa: E731

    def adamw(sched, decay):
        return optax.adamw(sched, b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=decay, mask=matrices)

    if trainable == "all" and not gate_lr:
        return optax.chain(clip, adamw(schedule, t.weight_decay))
    scale = (gate_lr / t.lr) if gate_lr else 1.0

    def labels(params):
        def label(path, _):
            names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
            if "memory_gate" in names:
                return "gate" if "g" in names else "train"
            return "frozen" if trainable == "memory_gate" else "train"
        return jax.tree_util.tree_map_with_path(label, params)

    frozen = lambda params: jax.tree_util.tree_map(lambda x: x == "frozen", labels(params))  # noqa: E731
    return optax.chain(
        optax.masked(optax.set_to_zero(), frozen),
        clip,
        optax.multi_transform({"train": adamw(schedule, t.weight_decay),
                               "gate": adamw(lambda step: scale * schedule(step), 0.0),
                               "frozen": optax.set_to_zero()}, labels),
    )


def upgraded(t, trainable: str, gate_lr: float):
    """``t`` with the pattern keys an old workdir's (trainable, gate_lr) upgrade to (edge_jax.config.upgrade_config)."""
    old = {k: t[k] for k in t if k not in ("trainable", "lr_multipliers")}
    new = upgrade_config({"train": {**old, "trainable": trainable, "gate_lr": gate_lr}})["train"]
    assert set(new) <= set(t)  # gate_lr is gone; keys it does not set read as their defaults (t's)
    return ml_collections.ConfigDict({**t.to_dict(), **new})


def _train(tx, params, steps=6):
    """``steps`` jitted updates on fixed pseudo-random gradients; the params after each."""
    state = tx.init(params)

    @jax.jit
    def step(params, state, i):
        grads = jax.tree_util.tree_map(lambda p: jnp.sin(p * (i + 1.0)) * 3.0, params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    out = []
    for i in range(steps):
        params, state = step(params, state, jnp.float32(i))
        out.append(params)
    return out


@pytest.mark.parametrize("trainable,gate_lr", [("all", 0.0), ("all", 5e-2), ("memory_gate", 0.0),
                                               ("memory_gate", 5e-2), ("memory_gate", 2e-3)])
def test_patterns_reproduce_the_old_trainable_and_gate_lr_bit_for_bit(trainable, gate_lr):
    t = _train_keys()
    params = _tree()
    want = _train(old_optimizer(t, trainable, gate_lr), params)
    got = _train(make_optimizer(upgraded(t, trainable, gate_lr))[0], params)
    for w, g in zip(want, got):
        jax.tree_util.tree_map(np.testing.assert_array_equal, w, g)
    moved = jax.tree_util.tree_map(lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))), params, got[-1])
    for path, m in jax.tree_util.tree_flatten_with_path(moved)[0]:
        assert m == (trainable == "all" or "memory_gate" in param_path(path)), param_path(path)


def test_default_keys_build_the_plain_chain():
    t = _train_keys()
    tx = make_optimizer(t)[0]
    assert len(tx.init(_tree())) == 2  # clip + adamw: no masking, no groups (today's optimizer state)
    plain = optax.chain(optax.clip_by_global_norm(t.clip_norm),
                        optax.adamw(make_schedule(t), b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=t.weight_decay,
                                    mask=lambda p: jax.tree_util.tree_map(lambda x: x.ndim > 1, p)))
    for w, g in zip(_train(plain, _tree()), _train(tx, _tree())):
        jax.tree_util.tree_map(np.testing.assert_array_equal, w, g)


def test_labels_follow_full_matches_and_the_first_multiplier():
    params = _tree()
    labels = {param_path(p): v for p, v in jax.tree_util.tree_flatten_with_path(
        param_labels(params, r"layers_\d+/(attn|ffn)/.*", (".*/kernel=0.5", ".*q_proj/kernel=3", ".*/g=2")))[0]}
    assert labels["embed/embedding"] == labels["layers_0/norm/scale"] == "frozen"
    assert labels["layers_1/attn/q_proj/kernel"] == labels["layers_0/ffn/down/kernel"] == "lr0"  # first match wins
    assert labels["layers_0/attn/memory_gate/g"] == "lr2" and labels["layers_0/attn/memory_gate/b1"] == "train"
    assert param_labels(params, "attn")["layers_0"]["attn"]["q_proj"]["kernel"] == "frozen"  # full match, not search
    trained, total = trained_count(params, ".*memory_gate.*")
    assert (trained, total) == (2 * (12 + 3 + 3 + 4), sum(int(x.size) for x in jax.tree_util.tree_leaves(params)))


def test_multipliers_scale_the_learning_rate():
    params = _tree()
    grads = jax.tree_util.tree_map(jnp.cos, params)

    def first_update(**keys):  # jitted: one compile instead of one per eager op of the chain
        tx = make_optimizer(_train_keys(warmup_steps=0, weight_decay=0.0, **keys))[0]
        return jax.jit(lambda g, p: tx.update(g, tx.init(p), p)[0])(grads, params)

    d0, d1 = first_update(), first_update(lr_multipliers=(".*ffn/.*=4",))
    np.testing.assert_allclose(d1["layers_0"]["ffn"]["up"]["kernel"], 4 * d0["layers_0"]["ffn"]["up"]["kernel"],
                               rtol=1e-6)
    q = ("layers_0", "attn", "q_proj", "kernel")
    np.testing.assert_array_equal(functools.reduce(dict.get, q, d1), functools.reduce(dict.get, q, d0))


def test_labels_see_through_partitioned_boxes():
    """At init the optimizer sees logically partitioned params (a ``value`` attribute under each leaf)."""
    import flax.linen as nn
    boxed = jax.tree_util.tree_map(lambda x: nn.LogicallyPartitioned(x, (None,) * x.ndim), _tree())
    labels = jax.tree_util.tree_leaves(param_labels(boxed, ".*memory_gate.*", (".*/g=2",)))
    assert labels.count("lr0") == 2 and labels.count("train") == 6
    tx = make_optimizer(_train_keys(trainable=".*memory_gate.*", lr_multipliers=(".*/g=2",)))[0]
    tx.init(boxed)  # builds


@pytest.mark.parametrize("keys,message", [
    ({"trainable": "layers_(0"}, r"train.trainable='layers_\(0' is not a regular expression"),
    ({"lr_multipliers": (".*g",)}, "must read REGEX=MULT"),
    ({"lr_multipliers": (".*g=-1",)}, "must read REGEX=MULT"),
    ({"lr_multipliers": ("(=2",)}, "is not a regular expression"),
])
def test_bad_patterns_are_one_line_errors(keys, message):
    with pytest.raises(ConfigError, match=message) as e:
        make_optimizer(_train_keys(**keys))
    assert "\n" not in str(e.value)



def test_finished_runs_evaluate_whichever_optimizer_wrote_them(tiny_config, tmp_path):
    """A finished run (and ``eval``) restores only the params, so a checkpoint whose optimizer groups
    differ from today's (an older edge_jax) still evaluates; resuming training needs the same layout."""
    from edge_jax.train.checkpoint import Checkpointer
    from edge_jax.train.evaluate import restore_latest
    from edge_jax.train.loop import TrainingError, _restore, train_and_evaluate
    from edge_jax.train.setup import build
    from edge_jax.train.state import abstract_train_state
    wd = str(tmp_path / "run")
    config = tiny_config(**{"train.steps": 3, "train.lr_multipliers": (".*embed.*=0.5",)})
    first = train_and_evaluate(config, wd)
    again = train_and_evaluate(config, wd)  # nothing left to train: params only
    assert again["val_loss"] == first["val_loss"] and again["train_loss"] == first["train_loss"]
    plain = build(tiny_config(**{"train.steps": 3}))  # clip + adamw: another optimizer state layout
    abstract = abstract_train_state(plain.model, plain.tx, plain.mesh)[0]
    ckpt = Checkpointer(f"{wd}/checkpoints", 3, 1)
    try:
        params = ckpt.restore_params(3, abstract.params)
        with pytest.raises(TrainingError, match="holds a train state of another layout") as e:
            _restore(ckpt, 3, abstract, wd)
        assert "\n" not in str(e.value)
    finally:
        ckpt.close()
    run, state, step = restore_latest(wd)
    assert step == 3 and state.opt_state is None
    jax.tree_util.tree_map(np.testing.assert_array_equal, state.params, params)


def test_a_run_saved_with_an_old_group_label_resumes(tiny_config, tmp_path):
    """Checkpoints of older edge_jax versions labelled the gate's multiplier group ``gate`` (now
    ``lr0``): resuming one restores that group's optimizer state under today's label."""
    from edge_jax.train.checkpoint import Checkpointer
    from edge_jax.train.loop import _restore
    from edge_jax.train.optim import group_names, rename_groups
    from edge_jax.train.setup import build
    from edge_jax.train.state import abstract_train_state, create_train_state
    run = build(tiny_config(**{"train.lr_multipliers": (".*embed.*=0.5",)}))
    state = create_train_state(run.model, run.tx, run.mesh, 0)[0]
    grads = jax.tree_util.tree_map(lambda p: jnp.full_like(p, 0.1), state.params)
    state = state.apply_gradients(grads=grads)  # non-zero moments in every group
    old = state.replace(opt_state=rename_groups(state.opt_state, {"lr0": "gate"}))
    assert group_names(old.opt_state) == {"gate", "train"}  # "frozen" holds no state
    ckpt = Checkpointer(str(tmp_path / "ckpt"), 3, 1)
    try:
        ckpt.save(1, old, {"step": 1}, force=True)
        ckpt.wait()
        assert ckpt.saved_groups(1) == {"gate", "train"}
        abstract = abstract_train_state(run.model, run.tx, run.mesh)[0]
        restored, data = _restore(ckpt, 1, abstract, str(tmp_path))
    finally:
        ckpt.close()
    assert data == {"step": 1} and group_names(restored.opt_state) == {"lr0", "train"}
    jax.tree_util.tree_map(np.testing.assert_array_equal, restored.opt_state, state.opt_state)
