"""Ablation files: load `ablations/<name>.py`, check the preset, call `get_grid(preset)`, validate.

An ablation file may list its presets, `PRESETS = ("tiny", "paper")`; one that does not has those of the
paper module its helpers come from (`edge_jax.papers.<paper>.grid.PRESETS`), and a preset outside them
is refused before get_grid builds anything. It defines `get_grid(preset: str) -> dict` with these keys:

    name             short id, used for the default output dir (results/<name>)
    title            the paper table or figure the grid reproduces
    base             config spec for edge_jax.config.load_config, "configs/lm.py:size=tiny"
    base_overrides   {dotted.key: value} applied to every cell
    cells            ordered {cell_name: {dotted.key: value}}; the table's rows
    metric           primary key of train_and_evaluate's result, e.g. "val_loss"
    lower_is_better  direction of `metric`
    extra_metrics    other result keys to tabulate
    paper            {"metric": label of the paper's own metric,
                      "values": {cell: number or None},
                      "higher_is_better": bool,
                      "source": where in the paper, e.g. "Fig. 10",
                      "order": optional [cell, ...] best first, for a paper that
                               states an ordering without numbers; an entry may be a
                               list of cells the paper does not order among themselves
                               (e.g. ["best", ["rest1", "rest2"]])}
    notes            free text shown under the table
    zero_shot        optional zero-shot tasks or groups scored after every cell's training
                     (a task set of edge_jax.eval, e.g. "builtin", or "facts_mc,code_cloze"); it sets
                     eval.zero_shot in every cell and adds the column zero_shot_avg (mean acc)
    stages           optional shared prerequisite runs (a base checkpoint) that cells refer to as
                     "{stage:name}" in override values; see edge_jax.grid.stages
    explanations     optional {"cellA>cellB": "one line"}: why a pair the paper orders comes out
                     significantly the other way in ours, written by a person after a run; the
                     table and `edge-jax summary` print it beside the disagreement
    record_notes     optional "module:function" called as function(grid, records) -> str: notes
                     that describe what the records hold (documents scored, eval.limit, KV slots
                     per method ...), written under ``notes``; a fact a run can change is never
                     a constant in ``notes``
    post             optional "module:function" called as function(grid, records, out) after
                     the table is written, for figures beyond the table (e.g. a scaling fit);
                     it returns the paths it wrote

Every problem is reported as one line through `GridSpecError`.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import re
import sys
from numbers import Real
from pathlib import Path
from typing import Any

from edge_jax import plugins
from edge_jax.errors import UserError, one_line, unknown
from edge_jax.grid.stages import check_stages

REQUIRED_KEYS = ("name", "title", "base", "base_overrides", "cells", "metric",
                 "lower_is_better", "extra_metrics", "paper", "notes")
PAPER_KEYS = ("metric", "values", "higher_is_better", "source")
PAPER_OPTIONAL_KEYS = ("order",)
OPTIONAL_KEYS = ("post", "record_notes", "stages", "zero_shot", "explanations")
ZERO_SHOT_METRIC = "zero_shot_avg"
# Cell and grid names become file and directory names.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


class GridSpecError(UserError, ValueError):
    """An ablation file that cannot be loaded or does not validate, or a preset it does not have."""


@dataclasses.dataclass(frozen=True)
class PaperRef:
    metric: str
    values: dict[str, float | None]
    higher_is_better: bool
    source: str
    order: tuple[str, ...]          # best first: explicit, or derived from values
    order_is_explicit: bool
    tied: tuple[tuple[str, ...], ...] = ()   # explicit groups the paper leaves unordered

    def ranks(self) -> dict[str, int]:
        """Paper rank per ranked cell, 1 = best; equal paper values share a rank."""
        if self.order_is_explicit:
            group = {cell: g[0] for g in self.tied for cell in g}
            ranks = {}
            for i, cell in enumerate(self.order):
                ranks[cell] = ranks[group[cell]] if cell in group and group[cell] != cell else i + 1
            return ranks
        ranks: dict[str, int] = {}
        for i, cell in enumerate(self.order):
            prev = self.order[i - 1] if i else None
            same = prev is not None and self.values[prev] == self.values[cell]
            ranks[cell] = ranks[prev] if same else i + 1
        return ranks


@dataclasses.dataclass(frozen=True)
class Grid:
    name: str
    title: str
    base: str
    base_overrides: dict[str, Any]
    cells: dict[str, dict[str, Any]]
    metric: str
    lower_is_better: bool
    extra_metrics: tuple[str, ...]
    paper: PaperRef
    notes: str
    preset: str
    path: str
    post: str = ""
    record_notes: str = ""
    stages: dict = dataclasses.field(default_factory=dict)
    explanations: dict = dataclasses.field(default_factory=dict)

    def overrides(self, cell: str, seed: int, extra: dict[str, Any] | None = None) -> dict:
        """base_overrides | cell overrides | {"seed": seed} | extra (later wins)."""
        return {**self.base_overrides, **self.cells[cell], "seed": seed, **(extra or {})}


# Every registry is an edge_jax.registry.Registry: code that can read one has imported this module.
REGISTRY_MODULE = "edge_jax.registry"


def hook(ref: str):
    """The function a grid's ``"module:function"`` key (``post``, ``record_notes``) names."""
    module, _, fn = ref.partition(":")
    return getattr(importlib.import_module(module), fn)


def load_grid(path: str | Path, preset: str = "tiny") -> Grid:
    """Import the ablation file at `path`, check `preset` against its presets (:func:`presets_of`), call
    get_grid(preset), validate it. A grid's cells may be built from the registries (one per registered KV
    method, ...), so a grid built while any registry module is imported is built with every registry full
    (:func:`edge_jax.plugins.load`, then once more where the first build came before it); one that touches
    no registry (a toy grid) loads no plugin, and so no JAX."""
    if plugins.loaded():
        return _load_grid(path, preset)
    try:
        grid = _load_grid(path, preset)
    except GridSpecError:
        if REGISTRY_MODULE not in sys.modules:
            raise
        grid = None             # perhaps a name not registered yet: the build below says
    if REGISTRY_MODULE in sys.modules:
        plugins.load()
        grid = _load_grid(path, preset)
    return grid


def _load_grid(path: str | Path, preset: str) -> Grid:
    path = Path(path)
    _check_file(path)
    module_name = f"_edge_jax_ablation_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - report any import failure in one line
        sys.modules.pop(module_name, None)
        raise GridSpecError(f"{path}: import failed: {type(e).__name__}: {one_line(e)}; fix the file, or install "
                            "what it imports") from e
    get_grid = getattr(module, "get_grid", None)
    if not callable(get_grid):
        raise GridSpecError(f"{path}: defines no get_grid(preset) function; add one (docs/grids.md)")
    presets = presets_of(module)
    if presets is not None and preset not in presets:
        raise GridSpecError(f"unknown preset {preset!r} of {path}; presets: {', '.join(presets)}")
    try:
        raw = get_grid(preset)
    except (ValueError, KeyError) as e:
        if presets is None and isinstance(e, KeyError) and e.args == (preset,):
            raise GridSpecError(f"unknown preset {preset!r} of {path} (its get_grid has none of that name)") from e
        raise GridSpecError(f"{path}: {one_line(e)}") from e
    return validate_grid(raw, preset=preset, path=str(path))


def presets_of(module) -> tuple[str, ...] | None:
    """The presets an ablation module declares: its own ``PRESETS``, else the ``PRESETS`` of the paper module
    its helpers come from (``edge_jax.papers.<paper>.grid``) when they all name the same ones; None when
    neither says (then get_grid alone decides)."""
    own = getattr(module, "PRESETS", None)
    if own is not None:
        return tuple(own)
    found = set()
    for value in vars(module).values():
        home = sys.modules.get(getattr(value, "__module__", None) or "")
        declared = getattr(home, "PRESETS", None) if home is not None and home is not module else None
        if isinstance(declared, (tuple, list)) and all(isinstance(p, str) for p in declared):
            found.add(tuple(declared))
    return found.pop() if len(found) == 1 else None


def _check_file(path: Path) -> None:
    """An ablation file path that exists and names a Python file, or one line naming the fix."""
    if path.is_dir():
        raise GridSpecError(f"ablation file {str(path)!r} is a directory; give one of its .py files, "
                            f"e.g. {str(path / 'NAME.py')!r}")
    if not path.exists():
        near = sorted(path.parent.glob("*.py")) if path.parent.is_dir() else []
        hint = unknown("ablation file", str(path), [str(p) for p in near]).partition("; ")[2]
        raise GridSpecError(f"ablation file {str(path)!r} not found; "
                            + (hint if near else "give the path of a .py file, e.g. ablations/NAME.py"))
    if path.suffix != ".py":
        raise GridSpecError(f"ablation file {str(path)!r} is not a Python file (.py); give one that defines "
                            "get_grid(preset), e.g. ablations/NAME.py")


def validate_grid(raw: Any, *, preset: str, path: str = "<grid>") -> Grid:
    """Check the dict returned by get_grid and freeze it into a Grid."""
    def fail(msg: str) -> GridSpecError:
        return GridSpecError(f"{path} (preset {preset!r}): {msg}")

    if not isinstance(raw, dict):
        raise fail(f"get_grid must return a dict, got {type(raw).__name__}")
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    if missing:
        raise fail(f"missing key(s): {', '.join(missing)}")
    unknown = sorted(set(raw) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise fail(f"unknown key(s): {', '.join(unknown)}; valid: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)}")
    post, record_notes = raw.get("post", ""), raw.get("record_notes", "")
    for key, value in (("post", post), ("record_notes", record_notes)):
        if not isinstance(value, str) or (value and not re.match(r"^[\w.]+:\w+$", value)):
            raise fail(f"{key!r} must be 'module:function', got {value!r}")

    for key in ("name", "title", "base", "metric"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise fail(f"{key!r} must be a non-empty string")
    if not isinstance(raw["notes"], str):
        raise fail("'notes' must be a string")
    if not _NAME_RE.match(raw["name"]):
        raise fail(f"name {raw['name']!r} must match {_NAME_RE.pattern}")
    if not isinstance(raw["lower_is_better"], bool):
        raise fail("'lower_is_better' must be True or False")

    base_overrides = _check_overrides(raw["base_overrides"], "base_overrides", fail)
    cells_raw = raw["cells"]
    if not isinstance(cells_raw, dict) or not cells_raw:
        raise fail("'cells' must be a non-empty dict of cell name -> overrides dict")
    cells = {}
    for cell, overrides in cells_raw.items():
        if not isinstance(cell, str) or not _NAME_RE.match(cell):
            raise fail(f"cell name {cell!r} must match {_NAME_RE.pattern}")
        cells[cell] = _check_overrides(overrides, f"cell {cell!r}", fail)

    extra = raw["extra_metrics"]
    if not isinstance(extra, (list, tuple)) or not all(isinstance(m, str) for m in extra):
        raise fail("'extra_metrics' must be a list of strings")
    zero_shot = raw.get("zero_shot", "")
    if not isinstance(zero_shot, str):
        raise fail(f"'zero_shot' must be a string of task names, got {zero_shot!r}")
    if zero_shot:
        if "eval.zero_shot" in base_overrides:
            raise fail("sets both 'zero_shot' and base_overrides['eval.zero_shot']; keep one")
        base_overrides["eval.zero_shot"] = zero_shot
        if ZERO_SHOT_METRIC != raw["metric"] and ZERO_SHOT_METRIC not in extra:
            extra = [*extra, ZERO_SHOT_METRIC]
    if raw["metric"] in extra:
        raise fail(f"'extra_metrics' repeats the primary metric {raw['metric']!r}")
    if len(set(extra)) != len(extra):
        raise fail("'extra_metrics' has duplicates")

    return Grid(
        name=raw["name"], title=raw["title"], base=raw["base"],
        base_overrides=base_overrides, cells=cells, metric=raw["metric"],
        lower_is_better=raw["lower_is_better"], extra_metrics=tuple(extra),
        paper=_check_paper(raw["paper"], cells, fail), notes=raw["notes"],
        preset=preset, path=path, post=post, record_notes=record_notes,
        stages=check_stages(raw.get("stages", {}), cells, fail),
        explanations=_check_explanations(raw.get("explanations", {}), cells, fail))


def _check_explanations(raw: Any, cells: dict, fail) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise fail("'explanations' must be a dict of \"cellA>cellB\" -> one-line reason")
    for key, reason in raw.items():
        parts = key.split(">") if isinstance(key, str) else []
        if len(parts) != 2 or not all(p in cells for p in parts):
            raise fail(f"explanations key {key!r} must be \"cellA>cellB\" naming two cells; "
                       f"cells: {', '.join(cells)}")
        if not isinstance(reason, str) or not reason.strip() or "\n" in reason.strip():
            raise fail(f"explanations[{key!r}] must be a one-line reason")
    return {k: v.strip() for k, v in raw.items()}


def _check_overrides(overrides: Any, where: str, fail) -> dict[str, Any]:
    if not isinstance(overrides, dict):
        raise fail(f"{where}: overrides must be a dict of dotted key -> value")
    for key in overrides:
        if not isinstance(key, str) or not key or key.startswith(".") or key.endswith("."):
            raise fail(f"{where}: bad override key {key!r}")
        if key == "seed":
            raise fail(f"{where}: sets 'seed'; seeds come from --seeds")
    return dict(overrides)


def _check_paper(paper: Any, cells: dict, fail) -> PaperRef:
    if not isinstance(paper, dict):
        raise fail("'paper' must be a dict")
    missing = [k for k in PAPER_KEYS if k not in paper]
    if missing:
        raise fail(f"paper: missing key(s): {', '.join(missing)}")
    unknown = sorted(set(paper) - set(PAPER_KEYS) - set(PAPER_OPTIONAL_KEYS))
    if unknown:
        raise fail(f"paper: unknown key(s): {', '.join(unknown)}")
    for key in ("metric", "source"):
        if not isinstance(paper[key], str) or not paper[key].strip():
            raise fail(f"paper.{key} must be a non-empty string")
    if not isinstance(paper["higher_is_better"], bool):
        raise fail("paper.higher_is_better must be True or False")

    values = paper["values"]
    if not isinstance(values, dict):
        raise fail("paper.values must be a dict of cell name -> number or None")
    for cell, value in values.items():
        if cell not in cells:
            raise fail(f"paper.values names {cell!r}, which is not a cell; "
                       f"cells: {', '.join(cells)}")
        ok = value is None or (isinstance(value, Real) and not isinstance(value, bool)
                               and math.isfinite(value))
        if not ok:
            raise fail(f"paper.values[{cell!r}] must be a finite number or None, got {value!r}")
    values = {cell: (None if v is None else float(v)) for cell, v in values.items()}
    numbered = [c for c in cells if values.get(c) is not None]
    derived = tuple(sorted(numbered, key=lambda c: values[c],
                           reverse=paper["higher_is_better"]))

    order = paper.get("order")
    if order is None:
        return PaperRef(paper["metric"], values, paper["higher_is_better"],
                        paper["source"], derived, order_is_explicit=False)
    if not isinstance(order, (list, tuple)) or not order:
        raise fail("paper.order must be a non-empty list of cell names, best first")
    tied = tuple(tuple(g) for g in order if isinstance(g, (list, tuple)))
    order = [c for g in order for c in (g if isinstance(g, (list, tuple)) else [g])]
    for cell in order:
        if cell not in cells:
            raise fail(f"paper.order names {cell!r}, which is not a cell; "
                       f"cells: {', '.join(cells)}")
    if len(set(order)) != len(order):
        raise fail("paper.order has duplicates")
    # Numbers and a stated order must not contradict each other.
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            va, vb = values.get(a), values.get(b)
            if va is None or vb is None:
                continue
            if (va < vb) if paper["higher_is_better"] else (va > vb):
                raise fail(f"paper.order puts {a!r} before {b!r} but paper.values say otherwise")
    return PaperRef(paper["metric"], values, paper["higher_is_better"], paper["source"],
                    tuple(order), order_is_explicit=True, tied=tied)

