"""Registries: one per variant axis, each mapping a name to what implements it.

A variant registers itself where it is defined, in one line::

    @FUSIONS.register("add_sigmoid")
    def add_sigmoid(e, gate): return e + nn.sigmoid(gate)

and everything that needs the list of names (validation messages, factories, CLI choices,
ablation cells) reads the registry, so adding a variant touches one place. Registries of the
generic core are defined here; a registry for a narrower axis lives beside the code it selects
(e.g. ``edge_jax.layers.ffn.FFN_KINDS``, ``edge_jax.infer.kv_baselines.KV_METHODS``).

A registry holds what the modules imported so far registered; reading one imports nothing. The one
bootstrap, :mod:`edge_jax.plugins`, imports the modules that register (the layers through the model,
the generic code's, every paper's): :func:`edge_jax.plugins.load` for all of them,
:func:`edge_jax.plugins.load_cli` for what the command line parses. The generic code never imports
a paper.
"""
from __future__ import annotations

import contextlib
import dataclasses
import weakref
from typing import Any, Callable, Generic, Iterator, TypeVar

from edge_jax import plugins
from edge_jax.errors import ConfigError, unknown

T = TypeVar("T")
_INSTANCES: list[weakref.ref] = []  # every Registry made in this process (Registry.instances), in creation order


class Registry(Generic[T]):
    """Names -> objects for one variant axis, in registration order.

    ``axis`` names the axis in messages; ``key`` is the config key that picks a name (if any), so
    an unknown name reads ``unknown model.ffn value 'relu3'; did you mean 'relu2'?``."""

    def __init__(self, axis: str, key: str | None = None):
        self.axis, self.key = axis, key
        self._items: dict[str, T] = {}
        _INSTANCES[:] = [ref for ref in _INSTANCES if ref() is not None]
        _INSTANCES.append(weakref.ref(self))

    @staticmethod
    def instances() -> list["Registry"]:
        """Every registry alive in this process, in creation order (a test snapshots them all to find
        what another test left registered)."""
        return [reg for reg in (ref() for ref in _INSTANCES) if reg is not None]

    def register(self, name: str, obj: Any = dataclasses.MISSING):
        """``REG.register("name", obj)``, or ``@REG.register("name")`` as a decorator. A name
        registered twice is an error (a silent replacement would hide a clash)."""
        if obj is dataclasses.MISSING:
            def decorate(o):
                self.register(name, o)
                return o
            return decorate
        if name in self._items:
            raise ValueError(f"{self.axis} {name!r} is registered twice; pick another name")
        self._items[name] = obj
        return obj

    @contextlib.contextmanager
    def override(self, name: str, obj: Any):
        """``with REG.override("name", obj):`` registers ``obj`` as ``name`` for the block only (a test's
        variant that later tests must not see); on leaving the block, also by an exception, ``name`` is
        removed and the other names keep their order, so the registry is as it was before. A name that
        is registered already is the error of :meth:`register`: the block adds a name, it never replaces
        one. What other code registers inside the block stays (a module registers once, when first
        imported, so removing its names would lose them for the rest of the process)."""
        self.register(name, obj)
        try:
            yield obj
        finally:
            if self._items.get(name) is obj:
                del self._items[name]

    def get(self, name: str) -> T:
        """The object registered as ``name``; a one-line :class:`ConfigError` naming the close
        names otherwise."""
        if name not in self._items:
            raise ConfigError(self._unknown(f"{self.key} value" if self.key else self.axis, name))
        return self._items[name]

    def check(self, name: str, key: str | None = None) -> None:
        """Raise the one-line error of :meth:`get` (naming ``key`` if given) for an unknown name."""
        if name not in self._items:
            raise ConfigError(self._unknown(f"{key or self.key or self.axis} value", name))

    def _unknown(self, kind: str, name: str) -> str:
        """The one line of an unknown name; before :func:`edge_jax.plugins.load` it says so, since the
        name may be one that a module not yet imported registers."""
        line = unknown(kind, name, self._items)
        if not plugins.loaded():
            line += " (the plugins are not loaded: call edge_jax.plugins.load() first)"
        return line

    def names(self) -> tuple[str, ...]:
        """The names registered so far, in registration order."""
        return tuple(self._items)

    def items(self) -> list[tuple[str, T]]:
        """``(name, object)`` registered so far, in registration order."""
        return list(self._items.items())

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.axis!r}, {list(self._items)})"


@dataclasses.dataclass(frozen=True)
class Section:
    """Config keys declared once, by the code that reads them.

    ``keys`` is a dataclass whose fields are the keys with their defaults (tuples for lists);
    they are merged into config section ``section`` (``"model"``, ``"train"``, or a section of
    their own such as ``"longctx"``). ``validate(config)`` checks them (one-line ConfigError);
    ``renames`` maps keys of older workdirs to this declaration (``{"old.key": "new.key"}``);
    ``resumable`` lists the keys (``"section.key"``) a run may change when it resumes a workdir
    (evaluation settings, not the model or the data); ``upgrade(flat)`` rewrites an older
    workdir's flat config in place where values (not only names) changed. Sections merge into
    their config section in ``order`` (lower first), then in registration order."""
    section: str
    keys: type
    validate: Callable[[Any], None] | None = None
    renames: dict = dataclasses.field(default_factory=dict)
    resumable: tuple = ()
    upgrade: Callable[[dict], None] | None = None
    order: int = 100

    def defaults(self) -> dict:
        return {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
                for f in dataclasses.fields(self.keys)}


@dataclasses.dataclass(frozen=True)
class ConfigTask:
    """A kind of run a config file can describe (``config.task``; ``lm`` when absent): its schema
    at the defaults and its validation. What runs it is registered in :data:`RUNNERS`."""
    schema: Callable[[], Any]
    validate: Callable[[Any], None]


@dataclasses.dataclass(frozen=True)
class Evaluator:
    """An evaluation after training, chosen by config: ``enabled(config)`` says whether this run
    asks for it; ``run(ctx) -> metrics`` gets an :class:`edge_jax.train.hooks.EvalContext` (the run,
    its trained params, the validation batches, the workdir, whether this process writes files).
    The loop runs the enabled evaluators in registration order (the core's ``qa`` first, then the
    papers' in the order of :data:`edge_jax.papers.PAPERS`) and merges their metrics into its result,
    so metric names must not collide (e.g. a prefix of the evaluator's own: ``longctx/``, ``moe/``)."""
    enabled: Callable[[Any], bool]
    run: Callable[[Any], dict]


# Config: tasks and the key declarations of the language-model task's features.
CONFIG_TASKS: Registry[ConfigTask] = Registry("task", key="task")
RUNNERS: Registry[Callable[[Any, str], dict]] = Registry("task runner", key="task")  # run(config, workdir)
SECTIONS: Registry[Section] = Registry("config section")
# After training (edge_jax.train.loop), benchmarks (edge-jax bench), and CLI subcommands.
EVALUATORS: Registry[Evaluator] = Registry("evaluator")
BENCHMARKS: Registry[Any] = Registry("benchmark")
COMMANDS: Registry[Any] = Registry("command")
# Generated blocks of the docs (edge-jax docs): kind -> fn(sources, *args, **options) -> markdown.
DOC_BLOCKS: Registry[Callable[..., str]] = Registry("doc block")
