"""Seeing what a train step does: the compiled step's memory per device, and a profiler trace of a
window of steps.

:func:`memory_bytes` reads the compiler's memory analysis of a compiled step (what ``edge-jax
compile`` reports for a target, :mod:`edge_jax.compile.aot`); :func:`record_memory` prints it in one
line at the start of a run and writes ``<workdir>/memory.json``.

:class:`StepProfiler` takes a ``jax.profiler`` trace of steps ``train.profile_start`` ..
``profile_start + profile_steps - 1`` (counted as the run counts them, from 1; a resumed run traces
what is left of the window) with a ``StepTraceAnnotation`` per step, and stops it when the window
ends or the run does (an error, a preemption). The trace goes to ``<workdir>/profile``
(``plugins/profile/<time>/<host>.xplane.pb`` for TensorBoard's profile plugin and xprof, with
``<host>.trace.json.gz`` and ``perfetto_trace.json.gz`` for ui.perfetto.dev). A trace shows one
host's devices, so in a job of several processes every process traces its own, into
``<workdir>/profile/process_<i>`` (processes on one host would otherwise write the same file names).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile

import jax

from edge_jax import distributed
from edge_jax.errors import one_line
from edge_jax.utils.atomic import copy_tree_atomic, write_json_atomic
from edge_jax.utils.storage import is_remote

# CompileStats' names (edge_jax.compile.aot) for memory_analysis()'s fields, in the order printed
MEMORY_FIELDS = {"argument_bytes": "argument_size_in_bytes", "output_bytes": "output_size_in_bytes",
                 "alias_bytes": "alias_size_in_bytes", "temp_bytes": "temp_size_in_bytes",
                 "code_bytes": "generated_code_size_in_bytes"}


def memory_bytes(compiled) -> dict | None:
    """Bytes one device holds for a compiled step (``jitted.lower(*args).compile()``): arguments,
    outputs, aliased (donated arguments reused as outputs, counted once), temporaries, generated code,
    and their total (arguments + outputs - aliased + temporaries + code); None where the backend's
    compiler gives no memory analysis."""
    try:
        mem = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - a backend without one raises (e.g. NotImplementedError, XlaRuntimeError)
        return None
    if mem is None:
        return None
    out = {key: int(getattr(mem, field)) for key, field in MEMORY_FIELDS.items()}
    out["total_bytes"] = (out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"] + out["temp_bytes"]
                          + out["code_bytes"])
    return out


def _size(n: float) -> str:
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20)):
        if n >= size:
            return f"{n / size:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{n / 2 ** 10:.1f} KiB"


def memory_line(mem: dict | None, device=None) -> str:
    """The one line a run prints for :func:`memory_bytes`' dict (None: the backend gives none)."""
    kind = f" ({device.device_kind})" if device is not None else ""
    if mem is None:
        return f"train step memory per device{kind}: the compiler gives no memory analysis on this backend"
    limit = mem.get("limit_bytes")
    return (f"train step memory per device{kind}: {_size(mem['total_bytes'])}"
            + (f" of {_size(limit)}" if limit else "")
            + f" (arguments {_size(mem['argument_bytes'])}, outputs {_size(mem['output_bytes'])}, aliased "
            f"{_size(mem['alias_bytes'])}, temporaries {_size(mem['temp_bytes'])}, code {_size(mem['code_bytes'])})")


def record_memory(compiled, workdir: str, device=None) -> dict | None:
    """The compiled train step's :func:`memory_bytes`, printed in one line and written to
    ``<workdir>/memory.json`` by the lead process (with the device kind, and ``limit_bytes``: what the
    device's allocator may use, where the backend says); None, and a line saying so, where the
    backend gives no memory analysis."""
    device = device if device is not None else jax.local_devices()[0]
    mem = memory_bytes(compiled)
    if mem is not None:
        stats = device.memory_stats() or {}
        if stats.get("bytes_limit"):
            mem["limit_bytes"] = int(stats["bytes_limit"])
    if distributed.is_lead():
        if mem is not None:
            write_json_atomic(os.path.join(workdir, "memory.json"), dict(mem, device_kind=device.device_kind))
        print(memory_line(mem, device), flush=True)
    return mem


def profile_dir(workdir: str) -> str:
    """Where this process's trace goes: ``<workdir>/profile``, or ``<workdir>/profile/process_<i>`` in a
    job of several processes."""
    root = os.path.join(workdir, "profile")
    n = distributed.process_count()
    return root if n == 1 else os.path.join(root, f"process_{distributed.process_index()}")


class StepProfiler:
    """A ``jax.profiler`` trace of steps ``start`` .. ``start + steps - 1`` into ``directory`` (steps 0:
    none); a context manager, so the trace is stopped and written however the loop ends::

        with StepProfiler(profile_dir(workdir), t.profile_start, t.profile_steps, t.steps) as profiler:
            for step in range(first, last + 1):
                with profiler.step(step):
                    state, metrics = train_step(state, batch)
                profiler.step_done(step, state)

    :meth:`step` starts the trace before the window's first step and marks each step of the window
    with a ``StepTraceAnnotation``; :meth:`step_done` waits for the window's last step to finish on the
    devices (its outputs ready) and stops the trace, so the devices' work of every traced step is in it.
    """

    def __init__(self, directory: str, start: int, steps: int, last_step: int | None = None, name: str = "train"):
        """``last_step``: the run's final step, where the trace stops if the window would go on."""
        end = int(start) + int(steps)
        self.directory, self.start, self.name = directory, int(start), name
        self.end = end if last_step is None else min(end, int(last_step) + 1)  # the first step not traced
        self.traced: list[int] = []   # the steps the trace holds (written when it stops)
        self._tracing = False
        self._local: str | None = None   # where a bucket's trace is written before it is uploaded

    def __enter__(self) -> StepProfiler:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def in_window(self, step: int) -> bool:
        return self.start <= step < self.end

    @contextlib.contextmanager
    def step(self, step: int):
        """The body of step ``step``: traced and annotated inside the window, untouched outside it."""
        if not self.in_window(step):
            yield
            return
        if not self._tracing:
            # a bucket's trace is written into a local directory and uploaded when it stops (JAX writes
            # perfetto_trace.json.gz with pathlib, and its profiler's own file calls are local ones)
            self._local = tempfile.mkdtemp(prefix="edge-jax-profile-") if is_remote(self.directory) else None
            os.makedirs(self._local or self.directory, exist_ok=True)
            # perfetto_trace.json.gz: the host's trace.json.gz without what ui.perfetto.dev refuses
            jax.profiler.start_trace(self._local or self.directory, create_perfetto_trace=True)
            self._tracing = True
        with jax.profiler.StepTraceAnnotation(self.name, step_num=step):
            yield
        self.traced.append(step)

    def step_done(self, step: int, outputs) -> None:
        """After step ``step`` was dispatched: at the window's last step, wait for ``outputs`` (the
        step's results) and stop the trace."""
        if self._tracing and step >= self.end - 1:
            jax.block_until_ready(outputs)
            self.stop()

    def stop(self) -> None:
        """Stop and write the trace, if one runs. A trace that cannot be written costs a line on stderr,
        not the run (nor the error the run is already stopping with)."""
        if not self._tracing:
            return
        self._tracing = False
        try:
            jax.profiler.stop_trace()
            if self._local:
                copy_tree_atomic(self._local, self.directory)
        except Exception as e:  # noqa: BLE001 - the profile is a diagnostic: the run goes on without it
            print(f"warning: the profile of steps {self._steps()} was not written to {self.directory} "
                  f"({type(e).__name__}: {one_line(e)})", file=sys.stderr, flush=True)
            return
        finally:
            if self._local:
                shutil.rmtree(self._local, ignore_errors=True)
        if distributed.is_lead():
            where = os.path.dirname(self.directory) if distributed.process_count() > 1 else self.directory
            print(f"profile of steps {self._steps()} written to {where} (open it with tensorboard --logdir "
                  f"{where} and its profile plugin, or perfetto_trace.json.gz in ui.perfetto.dev)", flush=True)

    def _steps(self) -> str:
        if not self.traced:
            return "none"
        return f"{self.traced[0]}-{self.traced[-1]}" if len(self.traced) > 1 else str(self.traced[0])
