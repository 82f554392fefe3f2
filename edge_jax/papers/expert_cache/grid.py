"""What the expert-cache ablation files (ablations/cache_*.py) share: traces, ScoutGate stages, metrics.

Every cell replays the held-out half of a routing trace (edge_jax.papers.expert_cache.experiment); ScoutGate is
trained once per trace and seed on the other half (the ``scout_real`` / ``scout_synthetic`` stages,
policy ``none``) and cells that use it load it (``scoutgate.from_dir``).
"""
from __future__ import annotations

from edge_jax.grid.paper import PaperGrid
from edge_jax.papers.expert_cache.config import base_config
from edge_jax.papers.expert_cache.engine import CACHE_POLICIES

GRID = PaperGrid({"tiny": "configs/cache.py"})
PRESETS = GRID.presets
BASE = GRID.base("tiny")
METRIC = "stall_ms_per_token"
EXTRA_METRICS = ["vram_hit_pct", "ram_hit_pct", "nvme_pct", "gb_to_vram", "gb_to_ram", "prefetch_gb_vram",
                 "prefetch_gb_ram", "scoutgate_recall_at_k", "ewma_recall_at_k", "accesses_per_s"]
TRACES = {
    "real": {"trace.source": "file", "trace.path": "results/npumoe_traces/seed{seed}/pystdlib_train.npz"},
    "synthetic": {"trace.source": "synthetic", "trace.path": "", "synthetic.d_embed": 128,
                  "synthetic.n_tokens": 1_048_576},
}
PAPER = {"metric": "none: the paper's results section is empty", "values": {}, "higher_is_better": False,
         "source": "two-tier MoE expert cache paper, §5 (empty); these are the first published numbers"}


check_preset = GRID.check


def stages() -> dict:
    base = GRID.base("tiny", "policy=none")
    return {f"scout_{t}": {"base": base, "overrides": dict(o)} for t, o in TRACES.items()}


def reads_scout(policy: str, eta: float | None = None) -> bool:
    """Whether a cell of ``policy`` (at ``predictor.eta``, the schema default if None) loads ScoutGate:
    the policy's own ``scout`` rule, read from its registration."""
    c = base_config()
    if eta is not None:
        c.predictor.eta = eta
    return CACHE_POLICIES.get(policy).scout(c)


def cell(trace: str, vram: float, policy: str, **predictor) -> dict:
    out = {**TRACES[trace], "cache.vram_fraction": vram, "cache.policy": policy,
           **{f"predictor.{k}": v for k, v in predictor.items()}}
    if reads_scout(policy, predictor.get("eta")):
        out["scoutgate.from_dir"] = f"{{stage:scout_{trace}}}"
    return out


NOTES = ("Device profile pcie4-nvme (edge_jax/papers/expert_cache/profile.py): a consumer GPU over PCIe 4.0 "
         "(25 GB/s) with "
         "a 7 GB/s NVMe SSD and 4-bit PhiMoE-sized experts; while a layer computes the watermark policies may "
         "prefetch in the idle link time (the sizes, costs, compute time and RAM fraction the cells ran with are "
         "under 'From the records'). Real trace: top-2 routing of the NPUMoE tiny "
         "model (4 MoE layers x 16 experts) of the seed over the first 1,048,576 tokens (4,096 sequences) of the "
         "Python standard library corpus's train split (results/npumoe_traces/seed<s>/pystdlib_train.npz; "
         "docs/npumoe.md says how much of it the model saw); synthetic: a seeded trace of the same shape and length "
         "(Zipf popularity, token-dependent routing, bursts, phase shifts). Each cell simulates the second half of "
         "the sequences from a cold cache; ScoutGate trains on the first half. Belady is the demand-fetch "
         "optimum (per-tier MIN, exact for one expert size): policies that "
         "prefetch can go below it. Watermark defaults (alpha 0.02, gamma 0.5) were picked on the first 16,384 "
         "tokens of the seed-0 validation trace; watermark_pop (ours, beside the paper's policy) was tuned on the "
         "seed-0 validation trace only, never on these traces.")
