"""Device mesh from the config (axes data, fsdp, tensor) and logical-axis rules.

:func:`make_mesh` is the one mesh builder: training, eval, grids and ``edge-jax compile`` lay out
the same devices the same way. Parameters and activations carry logical axis names (``embed``,
``mlp``, ``heads`` ...); :data:`LOGICAL_RULES` maps them onto mesh axes, MaxText style.
"""
from __future__ import annotations

import collections
import contextlib
import contextvars
import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from edge_jax.config import MESH_AXES, ConfigError

LOGICAL_RULES = (
    ("batch", ("data", "fsdp")),
    ("seq", None),
    ("embed", "fsdp"),
    ("vocab", "tensor"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("kv_lora", None),      # MLA latent width (d_c, and the query rank)
    ("norm", None),
    ("mem", "fsdp"),        # MeKi / PLE / Engram memory width: |V| x d_mem tables shard like the embedding
    ("ngram", "tensor"),    # rows of the hashed Engram tables, sharded like the vocabulary
    ("expert", None),       # MoE experts: replicated; each expert's width follows "mlp"
    ("layers", None),       # the scanned layer axis (model.scan_layers): every device holds every layer
)


def mesh_shape(mesh_cfg, n_devices: int) -> tuple[int, int, int]:
    sizes = [int(mesh_cfg[a]) for a in MESH_AXES]
    fixed = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
        if n_devices % fixed:
            raise ConfigError(f"mesh {dict(zip(MESH_AXES, sizes))} does not divide {n_devices} devices; "
                              "pick sizes whose product divides the device count")
        sizes[sizes.index(-1)] = n_devices // fixed
    if int(np.prod(sizes)) > n_devices:
        raise ConfigError(f"mesh {dict(zip(MESH_AXES, sizes))} needs {int(np.prod(sizes))} devices, "
                          f"only {n_devices} present; shrink mesh.data/fsdp/tensor")
    return tuple(sizes)


def make_mesh(mesh_cfg, devices=None) -> Mesh:
    """The ``data x fsdp x tensor`` mesh over ``devices`` (default ``jax.devices()``), laid out for
    the network: within a slice the axes follow the chips' ICI links (tensor, the most
    communication-heavy, on the nearest chips), and with several slices (devices of several
    ``slice_index`` values) ``data`` crosses them over DCN and must be a multiple of their number.
    Each process's devices hold one contiguous block of the batch rows (what
    :func:`process_block` needs) wherever a layout allows it (:func:`device_grid`).

    A mesh smaller than ``devices`` uses the first ``data*fsdp*tensor`` of them (a laptop run on
    one of its devices, tests on a few simulated ones); in a job of several processes it must use
    every device, or a process would hold no rows. ``edge-jax compile`` asks for all of a target's
    devices (:func:`edge_jax.compile.aot.mesh_for`) and gets the layout training builds there."""
    devices = list(jax.devices() if devices is None else devices)
    shape = mesh_shape(mesh_cfg, len(devices))
    used = math.prod(shape)
    processes = len({d.process_index for d in devices})
    if used < len(devices) and processes > 1:
        raise ConfigError(f"mesh {dict(zip(MESH_AXES, shape))} uses {used} of the {len(devices)} devices of a "
                          f"{processes}-process job; make data*fsdp*tensor = {len(devices)} (one axis may be -1)")
    return Mesh(device_grid(shape, devices[:used]), MESH_AXES)


def device_grid(shape: tuple[int, int, int], devices) -> np.ndarray:
    """``devices`` as an array of ``shape`` (data, fsdp, tensor): one block of ``data`` per slice,
    in ``slice_index`` order, each laid out by :func:`_slice_grid`."""
    slices = collections.defaultdict(list)
    for d in devices:
        slices[getattr(d, "slice_index", None) or 0].append(d)
    if len(slices) == 1:
        return _slice_grid(shape, devices)
    n, sizes = len(slices), {len(s) for s in slices.values()}
    if shape[0] % n or len(sizes) > 1:
        raise ConfigError(f"mesh data={shape[0]} must be a multiple of the {n} slices (the data axis crosses "
                          "slices over DCN) and the mesh must use every device of each; raise mesh.data")
    per_slice = (shape[0] // n, *shape[1:])
    return np.concatenate([_slice_grid(per_slice, slices[k]) for k in sorted(slices)], axis=0)


def _slice_grid(shape, devices) -> np.ndarray:
    """One slice's layout, the first of these whose processes each hold one block of rows: the
    topology-aware one (``mesh_utils.create_device_mesh``, physical axes split where the sizes ask
    for it; on CPU devices the given order); hosts as granules (``create_hybrid_device_mesh`` with
    ``process_is_granule``: topology-aware within a host, tensor then fsdp kept on a host, hosts in
    process order); the process order (``jax.devices()``: processes in turn, by device id)."""
    try:
        grid = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
    except (ValueError, NotImplementedError, AssertionError):  # no physical layout (a partial slice): below
        grid = None
    if grid is not None and (len({d.process_index for d in devices}) == 1 or rows_in_blocks(grid)):
        return grid
    grid = _host_grid(shape, devices)
    if grid is not None and rows_in_blocks(grid):
        return grid
    return np.asarray(sorted(devices, key=lambda d: (d.process_index, d.id)), dtype=object).reshape(shape)


def _host_grid(shape, devices) -> np.ndarray | None:
    """Each process's devices as one granule of the mesh: the tensor axis first, then fsdp, then
    data on a host (data only once fsdp is whole there, so a host's rows stay one block); None
    where the processes hold different numbers of devices or the sizes do not split so."""
    local = set(collections.Counter(d.process_index for d in devices).values())
    if len(local) > 1:
        return None
    n, (data, fsdp, tensor) = local.pop(), shape
    t = math.gcd(tensor, n)
    f = math.gcd(fsdp, n // t)
    d = n // (t * f)
    if data % d or (d > 1 and f < fsdp):
        return None
    try:
        return mesh_utils.create_hybrid_device_mesh((d, f, t), (data // d, fsdp // f, tensor // t), devices,
                                                     process_is_granule=True, allow_split_physical_axes=True)
    except (ValueError, NotImplementedError, AssertionError):
        return None


def rows_in_blocks(grid: np.ndarray) -> bool:
    """Whether every process's devices in ``grid`` (data, fsdp, tensor) hold one block of the batch
    rows (:func:`process_block`), the rows laid out over data x fsdp."""
    data, fsdp, _ = grid.shape
    rows = collections.defaultdict(set)
    for (i, j, _), device in np.ndenumerate(grid):
        rows[device.process_index].add((i * fsdp + j, i * fsdp + j + 1))
    try:
        for spans in rows.values():
            _one_block(sorted(spans), data * fsdp)
    except ConfigError:
        return False
    return True


def check_divisible(config, mesh: Mesh) -> None:
    """Impossible combinations of sizes and mesh, named in one line."""
    m, d = config.model, config.data  # the batch here, the model's dims in check_model_divisible
    batch_ways = mesh.shape["data"] * mesh.shape["fsdp"]
    micro = d.batch_size // config.train.grad_accum
    if micro % batch_ways:
        raise ConfigError(f"micro-batch {micro} (data.batch_size={d.batch_size} / train.grad_accum="
                          f"{config.train.grad_accum}) is not divisible by mesh data*fsdp={batch_ways}")
    check_model_divisible(m, mesh)


def check_model_divisible(m, mesh: Mesh) -> None:
    """The model's dimensions (``config.model``) against the tensor and fsdp axes, in one line."""
    t = mesh.shape["tensor"]
    for key in ("n_heads", "n_kv_heads", "d_ff", "vocab_size"):
        if m[key] % t:
            raise ConfigError(f"model.{key}={m[key]} is not divisible by mesh.tensor={t}; change either")
    if m.d_model % mesh.shape["fsdp"]:
        raise ConfigError(f"model.d_model={m.d_model} is not divisible by mesh.fsdp={mesh.shape['fsdp']}")


def _names(axes) -> tuple:
    """One entry of a PartitionSpec (a mesh axis name or a tuple of them) as a tuple of names."""
    return (axes,) if isinstance(axes, str) else tuple(axes)


def divisible_spec(spec: P, shape: tuple, mesh: Mesh) -> P:
    """``spec`` with every dimension that its mesh axes do not divide left unsharded (replicated):
    jit refuses uneven argument shardings, and a rule such as ``mem -> fsdp`` cannot know that
    d_mem 128 does not split 256 ways."""
    def ways(axes):
        return int(np.prod([mesh.shape[a] for a in _names(axes)]))

    return P(*(None if axes is not None and size % ways(axes) else axes
               for axes, size in zip(tuple(spec) + (None,) * (len(shape) - len(spec)), shape)))


def logical_shardings(abstract_tree, mesh: Mesh, rules=LOGICAL_RULES):
    """NamedShardings for a tree of (possibly boxed) abstract values; a dimension the rules would
    split unevenly is replicated instead (:func:`divisible_spec`)."""
    specs = nn.get_partition_spec(abstract_tree)
    shardings = nn.logical_to_mesh_sharding(specs, mesh, rules)
    # optax.multi_transform / masked leave empty MaskedNode placeholders in the optimizer state
    def keep_masked(a, s):
        inner = a.unbox() if isinstance(a, nn.meta.AxisMetadata) else a
        if isinstance(inner, optax.MaskedNode):
            return optax.MaskedNode()
        return NamedSharding(mesh, divisible_spec(s.spec, inner.shape, mesh))

    return jax.tree_util.tree_map(keep_masked, abstract_tree, shardings,
                                  is_leaf=lambda x: isinstance(x, (optax.MaskedNode, nn.meta.AxisMetadata)))


_ACTIVATION_MESH: contextvars.ContextVar = contextvars.ContextVar("edge_jax_activation_mesh", default=None)


@contextlib.contextmanager
def activation_sharding(mesh: Mesh):
    """While a step is traced inside this block, :func:`constrain` pins activations to ``mesh``
    (rows over data x fsdp, the vocabulary over tensor ...). Without it the compiler may replicate
    activations under fsdp: 5x the temporaries for two Qwen3-0.6B layers on 16 chips (docs/compile.md)."""
    token = _ACTIVATION_MESH.set(mesh)
    try:
        yield
    finally:
        _ACTIVATION_MESH.reset(token)


def constrain(x, names: tuple):
    """``x`` constrained to the logical axes ``names`` on the active mesh (:func:`activation_sharding`);
    ``x`` itself outside one or on a single device."""
    mesh = _ACTIVATION_MESH.get()
    if mesh is None or mesh.size == 1:
        return x
    return nn.with_logical_constraint(x, names, rules=LOGICAL_RULES, mesh=mesh)


def take_rows(table_VM, ids, width_axis: str = "mem"):
    """``table[ids]`` for a token-indexed table whose width is sharded (``width_axis``, over fsdp by
    :data:`LOGICAL_RULES`): each device looks up the ids of its whole fsdp group (ids are 4 bytes a
    token) in its own columns, then one all-to-all over fsdp moves the rows to the batch layout, so
    the backward pass scatter-adds into each device's own columns. With a plain ``take`` the
    compiler builds every device's partial gradient over the full width and all-reduces it over all
    devices: for Qwen3-4B MeKi on v5e-256 a float32 [151680, 512] all-reduce (296 MiB) per layer
    per step, gone with this (docs/compile.md). Outside a mesh, or when the width does not divide,
    it is ``jnp.take``."""
    mesh = _ACTIVATION_MESH.get()
    if mesh is None or mesh.size == 1:
        return jnp.take(table_VM, ids, axis=0)
    width = nn.logical_to_mesh_axes((width_axis,), LOGICAL_RULES)[0]
    if divisible_spec(P(width), table_VM.shape[-1:], mesh)[0] is None:
        return jnp.take(table_VM, ids, axis=0)
    width = _names(width)
    batch = nn.logical_to_mesh_axes(("batch",), LOGICAL_RULES)[0]
    outer = tuple(a for a in _names(batch) if a not in width) or None
    rest = (None,) * (ids.ndim - 1)
    ids = jax.lax.with_sharding_constraint(ids, NamedSharding(mesh, P(outer, *rest)))
    rows = jax.lax.with_sharding_constraint(jnp.take(table_VM, ids, axis=0),
                                            NamedSharding(mesh, P(outer, *rest, width)))
    return constrain(rows, ("batch",) + rest + (width_axis,))


def per_shard(fn, in_names: tuple, out_names: tuple):
    """``fn`` run on each device's shard under ``shard_map`` over the active mesh
    (:func:`activation_sharding`), for a computation XLA cannot partition (a Pallas call): argument
    ``i`` split by the logical axes ``in_names[i]``, the result by ``out_names`` (a tuple of them for
    a tuple of results). A logical axis whose mesh axes do not divide some array's dimension stays
    whole in every array. Inside, no mesh is active (no constraints, no nested ``shard_map``). ``fn``
    itself outside a mesh or on a single device."""
    mesh = _ACTIVATION_MESH.get()
    if mesh is None or mesh.size == 1:
        return fn

    def call(*args):
        out = jax.eval_shape(fn, *args)
        several = isinstance(out, tuple)
        shapes = [a.shape for a in args] + [o.shape for o in (out if several else (out,))]
        names = list(in_names) + list(out_names if several else (out_names,))
        # a logical axis that some array's dimension cannot split stays whole in every array, so the
        # shards still line up (e.g. rows of one array that index rows of another)
        whole = {n for ns, shape in zip(names, shapes) for n, size in zip(ns, shape)
                 if n is not None and divisible_spec(nn.logical_to_mesh_axes((n,), LOGICAL_RULES), (size,), mesh)[0]
                 is None}
        specs = [nn.logical_to_mesh_axes(tuple(None if n in whole else n for n in ns), LOGICAL_RULES) for ns in names]
        n_in = len(args)
        out_specs = tuple(specs[n_in:]) if several else specs[n_in]
        return jax.shard_map(local, mesh=mesh, in_specs=tuple(specs[:n_in]), out_specs=out_specs,
                             check_vma=False)(*args)

    def local(*args):  # inside, each device holds its shard: no constraints, no nested shard_map
        token = _ACTIVATION_MESH.set(None)
        try:
            return fn(*args)
        finally:
            _ACTIVATION_MESH.reset(token)

    return call


def on_mesh(mesh: Mesh, fn):
    """``fn`` (a jitted step) called, and so traced, inside :func:`activation_sharding` of ``mesh``."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        with activation_sharding(mesh):
            return fn(*args, **kwargs)

    return call


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(("data", "fsdp"), None))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def to_global(batch: dict, sharding) -> dict:
    """Process-local numpy batch -> global jax arrays laid out on the mesh (where this process holds
    every device, the whole batch in one transfer call)."""
    batch = {k: np.asarray(v) for k, v in batch.items()}
    if sharding.is_fully_addressable:
        return jax.device_put(batch, sharding)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def process_block(sharding, batch: int, process: int | None = None) -> tuple[int, int]:
    """``(j, n)``: this process (or ``process``) holds block ``j`` of ``n`` equal, contiguous row blocks
    of a global batch of ``batch`` rows laid out by ``sharding`` (the rows its devices hold; ``(0, 1)``
    when every process holds every row). The data pipeline loads only these rows, whatever the process
    count."""
    process = jax.process_index() if process is None else process
    spans = sorted({(i[0].start or 0, batch if i[0].stop is None else i[0].stop)
                    for d, i in sharding.devices_indices_map((batch, 1)).items() if d.process_index == process})
    return _one_block(spans, batch)


def _one_block(spans: list, batch: int) -> tuple[int, int]:
    """``(j, n)`` for sorted row ``spans`` that make up block ``j`` of ``n`` equal blocks of ``batch`` rows."""
    start, stop = spans[0][0], spans[0][0]
    for a, b in spans:
        if a > stop:
            raise ConfigError(f"this process's devices hold rows {spans} of the batch, not one block; build "
                              "the mesh with edge_jax.sharding.make_mesh (it keeps a process's rows together)")
        stop = max(stop, b)
    size = stop - start
    if batch % size or start % size:
        raise ConfigError(f"rows {start}..{stop} of a {batch}-row batch are not one of equal blocks; "
                          "use a data.batch_size the mesh's data x fsdp divides and a mesh.tensor that divides a "
                          "process's device count (or is a multiple of it)")
    return start // size, batch // size


def process_rows(batch: dict, sharding) -> dict:
    """This process's rows (:func:`process_block`) of a global host batch laid out by ``sharding``."""
    j, n = process_block(sharding, len(next(iter(batch.values()))))
    return {k: v[j * (len(v) // n):(j + 1) * (len(v) // n)] for k, v in batch.items()}
