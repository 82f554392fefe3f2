"""The MeKi grids' ``record_notes`` hook (set in :func:`edge_jax.papers.meki.grid.meki_grid`): what the
records ran with, written under each table's notes as "From the records: ...", so that no constant note can
contradict them."""
from __future__ import annotations

TASKS = ("facts_mc", "code_cloze", "longctx_mc")  # the built-in zero-shot tasks (edge_jax.eval.builtin)


def docs_scored(values: list[float], most: int = 100_000) -> int | None:
    """The fewest documents that make every accuracy in ``values`` a whole number of right answers (the
    records keep accuracies, not counts; over many records this is the count they all scored)."""
    for n in range(1, most):
        if all(abs(v * n - round(v * n)) < 1e-6 for v in values):
            return n
    return None


def record_notes(grid, records: list[dict]) -> str:
    """What the MeKi records ran with: steps and batch, data and vocabulary, the facts corpus, the
    documents each built-in task scored (from the accuracies), ``eval.limit``, the held-out questions
    asked, and the dense baseline's facts_mc at seed 0."""
    def one(path: str) -> str:
        seen = set()
        for r in records:
            value = r.get("config", {})
            for part in path.split("."):
                value = value.get(part, "?") if isinstance(value, dict) else "?"
            seen.add(str(value))
        return " or ".join(sorted(seen))

    scored = {task: docs_scored([r["metrics"][f"zero_shot/{task}"] for r in records
                                 if f"zero_shot/{task}" in r.get("metrics", {})]) for task in TASKS}
    limit = one("eval.limit")
    limit_text = "every built-in document scored (eval.limit 0)" if limit == "0" else f"eval.limit {limit}"
    docs_text = ", ".join(f"{task} {n:,}" for task, n in scored.items() if n)
    questions = sorted({int(r["metrics"]["questions"]) for r in records if "questions" in r.get("metrics", {})})
    seeds = sorted({int(r["seed"]) for r in records})
    text = (f"{len(records)} records, seeds {', '.join(map(str, seeds))}; {one('train.steps')} steps of "
            f"{one('data.batch_size')} x {one('data.seq_len')} tokens of {one('data.name')} "
            f"({one('data.facts_entities')} facts people), tokenizer {one('data.tokenizer')}; {limit_text}; "
            f"documents per task (the denominators of the records' accuracies): {docs_text}")
    if questions:
        text += f"; held-out facts questions answered greedily: {' or '.join(map(str, questions))}"
    base0 = [r["metrics"].get("zero_shot/facts_mc") for r in records if r.get("cell") == "baseline"
             and int(r["seed"]) == 0]
    if base0 and base0[0] is not None:
        text += f"; the dense baseline's facts_mc at seed 0: {base0[0]:.3f}"
    return text + "."
