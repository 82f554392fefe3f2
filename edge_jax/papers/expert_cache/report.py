"""Reports of the expert-cache grids, built from their records: capacity x policy tables, the goal check,
the stall-vs-capacity plot (``cache_policies``) and the watermark sensitivity table and plot
(``cache_sensitivity``). Called by ``edge-jax grid`` as the grids' ``post`` step."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from edge_jax.grid.tables import stat
from edge_jax.papers.expert_cache.engine import simulated_policies
from edge_jax.utils.atomic import save_figure_atomic, write_text_atomic

GOAL_VRAM = (0.2, 0.3)            # the goal: real traces at 20-30% VRAM
GOAL_LRU, GOAL_BELADY = 0.8, 1.3
PAPER_POLICY = "watermark"
CHALLENGERS = ("watermark_pop",)  # policies of ours beside the paper's, tested against it


def _trace(config: dict) -> str:
    return "synthetic" if config["trace"]["source"] == "synthetic" else "real"


def _fmt(values: list[float], digits: int = 2) -> str:
    if not values:
        return "—"
    st = stat(values)
    m, s = st.mean, st.std
    return f"{m:.{digits}f}" + (f" ± {s:.{digits}f}" if s is not None else "")


def collect(records: list[dict]) -> dict:
    """{(trace, vram, policy): {seed: metrics}}."""
    out: dict = defaultdict(dict)
    for r in records:
        c = r["config"]
        out[(_trace(c), c["cache"]["vram_fraction"], c["cache"]["policy"])][r["seed"]] = r["metrics"]
    return out


def ratios(data: dict, trace: str, vram: float, num: str, den: str) -> list[float]:
    """Per-seed stall ratio num / den (seeds both have)."""
    a, b = data.get((trace, vram, num), {}), data.get((trace, vram, den), {})
    return [a[s]["stall_ms_per_token"] / b[s]["stall_ms_per_token"] for s in sorted(set(a) & set(b))
            if b[s]["stall_ms_per_token"] > 0]


def _table(data, trace, vrams, policies, metric, digits=2) -> list[str]:
    lines = ["| VRAM | " + " | ".join(policies) + " |", "|---" * (len(policies) + 1) + "|"]
    for v in vrams:
        cells = [_fmt([m[metric] for m in data.get((trace, v, p), {}).values() if metric in m], digits)
                 for p in policies]
        lines.append(f"| {v:.0%} | " + " | ".join(cells) + " |")
    return lines


def write_policy_report(grid, records: list[dict], out) -> list[Path]:
    out = Path(out)
    data = collect(records)
    traces = [t for t in ("real", "synthetic") if any(k[0] == t for k in data)]
    lines = [f"# {grid.title}", "",
             "Stall is simulated decode stall per token (ms) on the held-out half of each trace, "
             "mean ± std over seeds; see table.md for every cell and the notes.", ""]
    for trace in traces:
        vrams = sorted({k[1] for k in data if k[0] == trace})
        policies = [p for p in simulated_policies() if any(k[0] == trace and k[2] == p for k in data)]
        lines += [f"## {trace} trace", "", "Stall, ms/token:", ""] + _table(data, trace, vrams, policies,
                                                                            "stall_ms_per_token")
        lines += ["", "Watermark stall relative to LRU and to Belady (per-seed ratios, mean ± std):", "",
                  "| VRAM | watermark / LRU | watermark / Belady | LRU / Belady |", "|---|---|---|---|"]
        for v in vrams:
            lines.append(f"| {v:.0%} | {_fmt(ratios(data, trace, v, 'watermark', 'lru'))} | "
                         f"{_fmt(ratios(data, trace, v, 'watermark', 'belady'))} | "
                         f"{_fmt(ratios(data, trace, v, 'lru', 'belady'))} |")
        for metric, label, digits in (("vram_hit_pct", "VRAM hit rate, % of accesses", 1),
                                      ("ram_hit_pct", "RAM hit rate, % of VRAM misses", 1),
                                      ("gb_to_vram", "GB moved into VRAM (prefetches included)", 0),
                                      ("gb_to_ram", "GB moved into RAM (prefetches included)", 0)):
            lines += ["", f"{label}:", ""] + _table(data, trace, vrams, policies, metric, digits)
        lines.append("")
    lines += goal_lines(data)
    for challenger in CHALLENGERS:
        if any(k[2] == challenger for k in data):
            lines += challenger_lines(data, challenger)
    md = out / "report.md"
    write_text_atomic(md, "\n".join(lines) + "\n")
    png = out / "stall.png"
    _plot(data, traces, png)
    return [md, png]


def goal_lines(data: dict) -> list[str]:
    lines = ["## Goal (real trace, VRAM 20-30%): watermark <= 0.8 x LRU and <= 1.3 x Belady", ""]
    for v in GOAL_VRAM:
        lru, bel = ratios(data, "real", v, "watermark", "lru"), ratios(data, "real", v, "watermark", "belady")
        if not lru or not bel:
            lines.append(f"- VRAM {v:.0%}: not run")
            continue
        ok_l, ok_b = stat(lru).mean <= GOAL_LRU, stat(bel).mean <= GOAL_BELADY
        lines.append(f"- VRAM {v:.0%}: watermark / LRU = {stat(lru).mean:.3f} ({'PASS' if ok_l else 'FAIL'}), "
                     f"watermark / Belady = {stat(bel).mean:.3f} ({'PASS' if ok_b else 'FAIL'})")
    return lines + [""]


def challenger_lines(data: dict, challenger: str) -> list[str]:
    """``challenger`` against Belady and, paired by seed, against the paper's policy, per trace and VRAM."""
    from edge_jax.grid.verdicts import paired_t
    lines = [f"## {challenger} (ours, beside the paper's policy) against {PAPER_POLICY} and Belady", "",
             f"Per-seed stall ratios, mean ± std; the paired t-test is on the per-seed stall difference "
             f"{PAPER_POLICY} - {challenger} (> 0: {challenger} stalls less), with its 95% interval.", ""]
    for trace in ("real", "synthetic"):
        vrams = sorted({k[1] for k in data if k[0] == trace and k[2] == challenger})
        if not vrams:
            continue
        lines += [f"### {trace} trace", "", f"| VRAM | {challenger} / Belady | {challenger} / {PAPER_POLICY} | "
                  f"{PAPER_POLICY} - {challenger}, ms/token (95% CI) | p | verdict |", "|---|---|---|---|---|---|"]
        for v in vrams:
            ours, theirs = data.get((trace, v, challenger), {}), data.get((trace, v, PAPER_POLICY), {})
            seeds = sorted(set(ours) & set(theirs))
            test = paired_t([theirs[s]["stall_ms_per_token"] - ours[s]["stall_ms_per_token"] for s in seeds])
            verdict = {"agree": f"{challenger} better", "disagree": f"{PAPER_POLICY} better"}.get(test.verdict,
                                                                                                  test.verdict)
            ci = f" ({test.ci[0]:+.3f}, {test.ci[1]:+.3f})" if test.ci else ""
            lines.append(f"| {v:.0%} | {_fmt(ratios(data, trace, v, challenger, 'belady'))} | "
                         f"{_fmt(ratios(data, trace, v, challenger, PAPER_POLICY), 3)} | "
                         f"{test.mean:+.3f}{ci} | {'—' if test.p is None else f'{test.p:.3g}'} | {verdict} |"
                         if test.mean is not None else f"| {v:.0%} | — | — | — | — | not run |")
        lines.append("")
    for v in GOAL_VRAM:
        bel = ratios(data, "real", v, challenger, "belady")
        if bel:
            lines.append(f"- Goal, real trace, VRAM {v:.0%}: {challenger} / Belady = {stat(bel).mean:.3f} "
                         f"({'PASS' if stat(bel).mean <= GOAL_BELADY else 'FAIL'}, goal <= {GOAL_BELADY})")
    return lines + [""]


def _plot(data: dict, traces: list[str], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(traces), figsize=(5.5 * len(traces), 4), squeeze=False)
    for ax, trace in zip(axes[0], traces):
        for p in simulated_policies():
            pts = sorted((v, stat([m["stall_ms_per_token"] for m in seeds.values()]).mean)
                         for (t, v, q), seeds in data.items() if t == trace and q == p and seeds)
            if pts:
                ax.plot([100 * v for v, _ in pts], [s for _, s in pts], marker="o",
                        linestyle="--" if p == "belady" else "-", label=p)
        ax.set(title=f"{trace} trace", xlabel="VRAM capacity (% of all experts' bytes)", ylabel="stall (ms/token)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure_atomic(fig, path, dpi=120)
    plt.close(fig)


# (label, config key in ``predictor``, cell-name prefix of the grid's cells)
SENSITIVITY = (("eta", "eta", "eta_"), ("gamma", "gamma", "gamma_"), ("watermark_step", "watermark_step", "step_"),
               ("hysteresis", "hysteresis", "hyst_"))


def write_sensitivity_report(grid, records: list[dict], out) -> list[Path]:
    """One table and one panel per swept parameter: stall of each value (others at their defaults)."""
    out = Path(out)
    by_cell: dict = defaultdict(list)
    for r in records:
        by_cell[r["cell"]].append(r)
    default = [r["metrics"]["stall_ms_per_token"] for r in by_cell.get("default", [])]
    lines = [f"# {grid.title}", "", f"Default: {_fmt(default, 3)} ms/token stall. Each row changes one parameter.", ""]
    series = {}
    for name, key, prefix in SENSITIVITY:
        rows = sorted({(r["config"]["predictor"][key], r["cell"]) for cell, rs in by_cell.items() for r in rs
                       if cell.startswith(prefix) or cell == "default"})
        values = defaultdict(list)
        for value, cell in rows:
            values[value] += [r["metrics"]["stall_ms_per_token"] for r in by_cell[cell]]
        if len(values) < 2:
            continue
        series[name] = sorted(values.items())
        lines += [f"## {name}", "", f"| {name} | stall ms/token | VRAM hit % |", "|---|---|---|"]
        for value, _ in series[name]:
            cells = [c for v, c in rows if v == value]
            hits = [r["metrics"]["vram_hit_pct"] for c in cells for r in by_cell[c]]
            lines.append(f"| {value:g} | {_fmt(values[value], 3)} | {_fmt(hits, 1)} |")
        lines.append("")
    md = out / "report.md"
    write_text_atomic(md, "\n".join(lines) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, max(len(series), 1), figsize=(4 * max(len(series), 1), 3.5), squeeze=False)
    for ax, (name, pts) in zip(axes[0], series.items()):
        ax.plot([v for v, _ in pts], [stat(s).mean for _, s in pts], marker="o")
        ax.set(xlabel=name, ylabel="stall (ms/token)", xscale="symlog" if name == "watermark_step" else "linear")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    png = out / "sensitivity.png"
    save_figure_atomic(fig, png, dpi=120)
    plt.close(fig)
    return [md, png]
