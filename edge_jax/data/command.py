"""``edge-jax data prepare``: tokenise a dataset's splits once into prepared token shards
(:mod:`edge_jax.data.shards`), each process of a job preparing its share; training then reads them.

    edge-jax data prepare --config configs/lm.py:size=tiny --config.data.name='parquet:/data/fw/*.parquet' \\
        --config.data.tokenizer=hf:/data/qwen3/tokenizer.json --config.data.tokens_dir=gs://bucket/tokens

Killed, it resumes where it stopped (finished shards are kept); run again, it only prints what exists.
"""
from __future__ import annotations

import time

from edge_jax import distributed


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="data_command", required=True)
    p = sub.add_parser("prepare", help="tokenise a dataset's splits into shards that training reads "
                                       "(docs/data.md)")
    p.add_argument("--config", required=True, help="path/to/config.py[:arg]; its data.* name the dataset")
    p.add_argument("--splits", default="train,validation", help="comma-separated splits to prepare")
    p.set_defaults(fn=run, takes_overrides=True)


def prepare_splits(data_cfg, splits: list[str], say=print) -> list[tuple[str, str, int, int]]:
    """Prepare ``splits`` of every leaf dataset of ``data_cfg``: ``[(split, dir, shards, tokens)]``."""
    from edge_jax.data.pipeline import tokens_dir
    from edge_jax.data.shards import TokenShards, prepare
    from edge_jax.data.sources import resolve_cfg
    from edge_jax.data.tokenizers import get_tokenizer

    source = resolve_cfg(data_cfg)
    tok = get_tokenizer(data_cfg.tokenizer, data_cfg, getattr(data_cfg, "data_dir", ""))
    leaves = list({p.key: p for p in (source.parts or (source,))}.values())
    out = []
    for split in splits:
        for leaf in leaves if split == "train" else leaves[:1]:
            t0 = time.perf_counter()

            def progress(done: int, total: int, leaf=leaf, split=split) -> None:
                if done == total or done % max(1, total // 10) == 0:
                    say(f"  {leaf.name} {split}: {done}/{total} of this process's pieces "
                        f"({time.perf_counter() - t0:.0f} s)")
            root = prepare(leaf, split, tok, tokens_dir(data_cfg), progress)
            shards = TokenShards([root], tok.vocab_size, tok.name)
            out.append((split, root, len(shards.files), len(shards)))
    return out


def run(args, overrides) -> int:
    from edge_jax.config import load_config

    distributed.start()
    data = load_config(args.config, overrides).data
    lead = distributed.is_lead()
    say = print if lead else (lambda line: None)
    t0 = time.perf_counter()
    done = prepare_splits(data, [s.strip() for s in args.splits.split(",") if s.strip()], say)
    for split, root, shards, tokens in done:
        say(f"{split}: {tokens:,} tokens in {shards} shards at {root}")
    say(f"prepared in {time.perf_counter() - t0:.1f} s by {distributed.process_count()} process(es)")
    return 0
