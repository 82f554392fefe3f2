"""How a job starts (one process or many) and how its processes agree.

Every edge_jax command may be one of N processes of a multi-host JAX job: a Cloud TPU VM slice
(every worker runs the same command), GKE, Slurm, Open MPI, or ``edge-jax launch`` on one machine.
:func:`start` decides, once per process and before any backend starts, how the job begins:

1. explicit settings, from the flags ``--coordinator-address --num-processes --process-id`` of the
   commands, else the environment variables ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``,
   ``JAX_PROCESS_ID`` (what ``edge-jax launch`` sets); a partial set is one line naming what is
   missing, and ``--num-processes 1`` is a single process;
2. a cluster JAX detects itself: Slurm and Open MPI with more than one task, GKE TPU pods
   (``TPU_WORKER_HOSTNAMES``), a Cloud TPU VM (a TPU chip on the PCI bus: JAX asks the metadata
   server how many workers the slice has), Kubernetes with the ``kubernetes`` package;
3. otherwise a single process, which never waits for a coordinator.

``EDGE_JAX_DISTRIBUTED=0`` forces a single process, ``=1`` asks JAX to detect the cluster.

Once started, process 0 writes every shared file (:func:`is_lead`; the atomic writers of
:mod:`edge_jax.utils.atomic` write nothing on the others) and the processes agree through the
coordinator's key-value store: :func:`on_lead` runs a function on process 0 and hands its result
(or its error) to every process, :func:`gather` collects one value from each, :func:`barrier` waits
for all, and :func:`prepared` builds a data artefact once on a shared directory (each host its own
copy on a host-local one). With a single process these are plain calls.
"""
from __future__ import annotations

import atexit
import contextlib
import contextvars
import dataclasses
import glob
import importlib
import importlib.util
import json
import os
import sys
from typing import Callable, TypeVar

from edge_jax.errors import ConfigError, UserError, one_line
from edge_jax.utils import rendezvous

T = TypeVar("T")

COORDINATOR, NUM_PROCESSES, PROCESS_ID = "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"
FLAGS = {COORDINATOR: "--coordinator-address", NUM_PROCESSES: "--num-processes", PROCESS_ID: "--process-id"}
SWITCH = "EDGE_JAX_DISTRIBUTED"     # 0: one process whatever the environment; 1: let JAX detect the cluster
WAIT_ENV = "EDGE_JAX_WAIT_S"        # how long a process waits for the others at one agreement point
WAIT_S = 6 * 3600                   # process 0 may prepare a dataset or train a stage meanwhile
JOIN_ENV = "EDGE_JAX_JOIN_TIMEOUT_S"  # how long the processes of a job wait for each other at its start
JOIN_FLAG = "--join-timeout"
JOIN_S = 300.0
EXIT_LOST = 2                       # a process that lost a peer: one line, like any error a user acts on


class DistributedError(UserError, RuntimeError):
    """The job cannot start, or its processes stopped agreeing (one line: what and what to do)."""


@dataclasses.dataclass(frozen=True)
class Startup:
    """How this process joins the job: ``single``, ``explicit`` (address, count and id given) or
    ``cluster`` (``jax.distributed.initialize()`` detects them; ``cluster`` names the kind)."""
    how: str
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    cluster: str | None = None


def _int(name: str, value) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={value!r} is not an integer; give a whole number") from None


def tpu_chips() -> int:
    """TPU chips on this machine's PCI bus (what JAX's own Cloud TPU check counts), without importing JAX."""
    return _hardware_utils().num_available_tpu_chips_and_device_id()[0]


def nvidia_gpus() -> bool:
    """Whether this machine shows NVIDIA GPU devices (JAX's own check), without importing JAX."""
    return _hardware_utils().has_visible_nvidia_gpu()


_HARDWARE_UTILS = "jax._src.hardware_utils"


def _hardware_utils():
    """JAX's device checks (``jax._src.hardware_utils``, which imports only the standard library), loaded
    from its file without importing the ``jax`` package: that import takes seconds and hundreds of MB, which
    ``edge-jax launch`` and ``summary`` never need. Where the file is not found, the ordinary import."""
    if _HARDWARE_UTILS in sys.modules:
        return sys.modules[_HARDWARE_UTILS]
    standalone = f"edge_jax._{_HARDWARE_UTILS.replace('.', '_')}"
    if standalone in sys.modules:
        return sys.modules[standalone]
    jax_spec = importlib.util.find_spec("jax")
    locations = list(jax_spec.submodule_search_locations or []) if jax_spec else []
    files = [f for f in (os.path.join(d, "_src", "hardware_utils.py") for d in locations) if os.path.isfile(f)]
    if not files:
        return importlib.import_module(_HARDWARE_UTILS)
    spec = importlib.util.spec_from_file_location(standalone, files[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[standalone] = module
    return module


def detect_cluster(env=os.environ) -> tuple[str, int | None] | None:
    """``(kind, process count or None when JAX finds it out)`` of a cluster JAX can start itself in."""
    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
    if all(v in env for v in slurm):
        return "Slurm", _int("SLURM_NTASKS", env["SLURM_NTASKS"])
    if "OMPI_MCA_orte_hnp_uri" in env:
        return "Open MPI", _int("OMPI_COMM_WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE"))
    hosts = env.get("TPU_WORKER_HOSTNAMES") or env.get("TPU_PROCESS_ADDRESSES")
    if hosts and tpu_chips():
        return "GKE TPU", len([h for h in hosts.split(",") if h.strip()])
    if tpu_chips():
        return "Cloud TPU VM", None
    if "KUBERNETES_SERVICE_HOST" in env and importlib.util.find_spec("kubernetes") is not None:
        return "Kubernetes", None
    return None


def decide(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
           env=os.environ) -> Startup:
    """How the job starts (module docstring); flags win over environment variables."""
    given = {COORDINATOR: coordinator or env.get(COORDINATOR) or None,
             NUM_PROCESSES: _int(FLAGS[NUM_PROCESSES], num_processes) if num_processes is not None
             else _int(NUM_PROCESSES, env.get(NUM_PROCESSES)),
             PROCESS_ID: _int(FLAGS[PROCESS_ID], process_id) if process_id is not None
             else _int(PROCESS_ID, env.get(PROCESS_ID))}
    switch = env.get(SWITCH, "auto")
    if switch == "0":
        return Startup("single")
    if given[COORDINATOR] is not None:
        address = given[COORDINATOR]
        rendezvous.split_address(address, f"{FLAGS[COORDINATOR]} {address}" if coordinator else
                                 f"{COORDINATOR}={address}")
    n, i = given[NUM_PROCESSES], given[PROCESS_ID]
    if n is not None and n < 1:
        raise ConfigError(f"{FLAGS[NUM_PROCESSES]} / {NUM_PROCESSES}={n}: give at least 1")
    if n is not None and i is not None and not 0 <= i < n:
        raise ConfigError(f"{FLAGS[PROCESS_ID]} / {PROCESS_ID}={i} is outside 0..{n - 1} for {n} processes")
    if n == 1:
        return Startup("single")
    cluster = detect_cluster(env)
    if any(v is not None for v in given.values()):
        missing = [f"{FLAGS[k]} ({k})" for k, v in given.items() if v is None]
        if not missing:
            return Startup("explicit", given[COORDINATOR], n, i)
        if cluster is None:  # nothing to fill the rest in
            have = ", ".join(f"{k}={v}" for k, v in given.items() if v is not None)
            verb, it = ("is", "it") if len(missing) == 1 else ("are", "them")
            raise ConfigError(f"a multi-process start needs the coordinator address, the number of processes and "
                              f"this process's id; {have} is set but {' and '.join(missing)} {verb} missing: set "
                              f"{it}, or run the command under `edge-jax launch --processes N -- ...`")
        return Startup("cluster", given[COORDINATOR], n, i, cluster=cluster[0])
    if cluster is not None and cluster[1] != 1:
        return Startup("cluster", cluster=cluster[0])
    if switch == "1":
        return Startup("cluster", cluster="auto")
    return Startup("single")


_STARTED: Startup | None = None


def join_timeout(seconds: float | None = None, env=os.environ) -> float:
    """How long the processes of an explicit job wait for each other at its start: ``--join-timeout``, else
    ``$EDGE_JAX_JOIN_TIMEOUT_S``, else :data:`JOIN_S`."""
    if seconds is None:
        text = env.get(JOIN_ENV, "")
        try:
            seconds = float(text) if text else JOIN_S
        except ValueError:
            raise ConfigError(f"{JOIN_ENV}={text!r} is not a number of seconds; give e.g. {JOIN_S:g}") from None
    if not seconds > 0:
        raise ConfigError(f"{JOIN_FLAG} / {JOIN_ENV}={seconds:g}: give a number of seconds above 0")
    return float(seconds)


_LINK: rendezvous.Link | None = None
_WORKDIR: list[str | None] = [None]


def start(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
          timeout_s: float | None = None, workdir: str | None = None) -> Startup:
    """Join the job as :func:`decide` says (``jax.distributed.initialize`` for many processes). Idempotent:
    a later call returns the first one's decision; call it before anything starts a JAX backend.

    With explicit settings the processes first check in with process 0 (:mod:`edge_jax.utils.rendezvous`):
    one line says where and for how many, and a process missing after ``timeout_s`` (:func:`join_timeout`),
    a duplicate id or another process count is one error line on every process. They then watch each
    other: a process that is lost stops the others with one line naming it and ``workdir``'s last
    checkpoint (:func:`lost`)."""
    global _STARTED, _LINK
    if _STARTED is not None:
        return _STARTED
    plan = decide(coordinator, num_processes, process_id)
    wait_s = join_timeout(timeout_s)   # in a detected cluster JAX's own start-up timeout
    import jax
    if plan.how != "single" and not jax.distributed.is_initialized():
        if plan.how == "explicit":
            others = f"the other {plan.num_processes - 1}" if plan.num_processes > 2 else "the other process"
            print(f"edge-jax: process {plan.process_id} of {plan.num_processes} joins the job at {plan.coordinator}; "
                  f"waiting up to {wait_s:g} s for {others} ({JOIN_FLAG})", file=sys.stderr, flush=True)
            _LINK = rendezvous.check_in(plan.coordinator, plan.num_processes, plan.process_id, wait_s)
            _WORKDIR[0] = workdir
            atexit.register(_LINK.bye)   # before JAX's own exit handlers: an orderly exit is not a loss
            _LINK.watch(lost)
        try:
            jax.distributed.initialize(plan.coordinator, plan.num_processes, plan.process_id,
                                       initialization_timeout=max(1, round(wait_s)))
        except (ValueError, RuntimeError, TypeError) as e:
            raise DistributedError(f"could not start the multi-process job ({plan.cluster or 'explicit settings'}): "
                                   f"{one_line(e)}; check the coordinator address and that every process runs the "
                                   "same command") from None
    _STARTED = plan
    return plan


def lost(process: int) -> None:
    """Another process of the job is gone without leaving in order (killed, or its host went away): stop
    this one at once with one line naming it and where to resume, instead of JAX's crash dump later."""
    step = rendezvous.last_checkpoint(_WORKDIR[0])
    where = (f"; the last checkpoint in {_WORKDIR[0]} is step {step}: rerun the same command on every process "
             "to resume from it" if step is not None else "; rerun the same command on every process")
    sys.stdout.flush()
    bars = getattr(sys.modules.get("tqdm"), "tqdm", None)
    if getattr(bars, "_instances", None):   # a progress bar holds the line: start a new one
        sys.stderr.write("\n")
    print(f"edge-jax: error: process {process} of the job was lost (killed, or its host went away); stopping "
          f"process {_LINK.process_id if _LINK else process_index()}{where}", file=sys.stderr, flush=True)
    os._exit(EXIT_LOST)


def leave(status: int) -> None:
    """A process of a multi-process job that fails exits at once with ``status``: it does not wait at
    JAX's shutdown barrier for processes that will never reach it (they are stopped by
    ``edge-jax launch`` or by the cluster when this one is gone). A single process returns."""
    if _LINK is not None:
        _LINK.bye()
    if process_count() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def quiet_platforms(env=os.environ) -> None:
    """On a machine with neither a TPU chip nor an NVIDIA GPU, start JAX on the CPU only, so an installed
    libtpu (the ``tpu`` extra, for ``edge-jax compile``) does not probe for a chip and print its errors.
    An explicit ``JAX_PLATFORMS`` is left alone."""
    if env.get("JAX_PLATFORMS") is not None:
        return
    if tpu_chips() or nvidia_gpus() or glob.glob("/dev/kfd"):
        return
    env["JAX_PLATFORMS"] = "cpu"
    if "jax" in sys.modules:    # else JAX reads the variable when it is imported
        import jax
        jax.config.update("jax_platforms", "cpu")


def _client():
    from jax._src import distributed as jax_distributed
    return jax_distributed.global_state.client


def process_count() -> int:
    if "jax" not in sys.modules:  # JAX never imported: this process joined no job (and a usage error stays light)
        return 1
    from jax._src import distributed as jax_distributed
    state = jax_distributed.global_state
    return int(state.num_processes) if state.client is not None and state.num_processes else 1


def process_index() -> int:
    from jax._src import distributed as jax_distributed
    state = jax_distributed.global_state
    return int(state.process_id or 0) if state.client is not None else 0


_SOLO: contextvars.ContextVar = contextvars.ContextVar("edge_jax_solo", default=False)


def is_lead() -> bool:
    """True on process 0, the one that writes shared files (and inside :func:`solo`)."""
    return process_index() == 0 or _SOLO.get()


def _alone() -> bool:
    return process_count() == 1 or _SOLO.get()


def share() -> tuple[int, int]:
    """``(i, n)``: this process does the i-th of n equal parts of work the job splits (``(0, 1)`` alone or
    inside :func:`solo`)."""
    return (0, 1) if _alone() else (process_index(), process_count())


@contextlib.contextmanager
def solo():
    """Within this block this process works alone: it writes its own files (a copy on a host-local
    directory) and agrees with no one (what :func:`on_lead` runs on process 0 is inside one)."""
    token = _SOLO.set(True)
    try:
        yield
    finally:
        _SOLO.reset(token)


_SEQUENCE = [0]


def _key(name: str) -> str:
    """A key every process derives alike: the processes pass their agreement points in the same order."""
    _SEQUENCE[0] += 1
    return f"edge_jax/{_SEQUENCE[0]}/{name}"


def _wait_ms() -> int:
    return int(float(os.environ.get(WAIT_ENV, WAIT_S)) * 1000)


def _get(key: str, name: str) -> str:
    try:
        return _client().blocking_key_value_get(key, _wait_ms())
    except Exception as e:  # noqa: BLE001 - the runtime raises its own types
        raise DistributedError(f"process {process_index()} waited for the others at '{name}' and gave up "
                               f"({one_line(e)[:200]}); "
                               "another process died or runs a different command (see its output)") from None


def barrier(name: str) -> None:
    """Wait until every process reaches this point."""
    if not _alone():
        gather(name, True)


def gather(name: str, value) -> list:
    """Every process's ``value`` (JSON-able), in process order, on every process."""
    if _alone():
        return [value]
    key = _key(name)
    _client().key_value_set(f"{key}/{process_index()}", json.dumps(value))
    return [json.loads(_get(f"{key}/{p}", name)) for p in range(process_count())]


def on_lead(name: str, fn: Callable[[], T]) -> T:
    """``fn()`` run on process 0 only; every process returns its (JSON-able) result, or raises its error
    again (same class where it takes one message, else :class:`DistributedError`)."""
    if _alone():
        return fn()
    key = _key(name)
    if process_index() == 0:
        try:
            with solo():
                value = fn()
        except Exception as e:
            _client().key_value_set(key, json.dumps({"error": [type(e).__module__, type(e).__qualname__, one_line(e)]}))
            raise
        _client().key_value_set(key, json.dumps({"value": value}))
        return value
    outcome = json.loads(_get(key, name))
    if "error" in outcome:
        raise _rebuilt(*outcome["error"])
    return outcome["value"]


def _rebuilt(module: str, qualname: str, message: str) -> Exception:
    try:
        cls = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if isinstance(cls, type) and issubclass(cls, Exception):
            return cls(message)
    except Exception:  # noqa: BLE001 - any class that cannot be rebuilt is reported generically
        pass
    return DistributedError(f"process 0 failed: {qualname}: {message}")


def prepared(name: str, done: Callable[[], bool], build: Callable[[], None]) -> None:
    """Make a data artefact exist for every process: process 0 builds it unless ``done()``, the others wait
    for it; a process that still does not see it (a host-local directory) builds its own copy."""
    if _alone():
        if not done():
            build()
        return
    on_lead(name, lambda: None if done() else build())
    if not done():
        with solo():
            build()
