"""``edge-jax hf import SRC --workdir W [--check]`` and ``edge-jax hf export --workdir W --out DIR [--step N]``
(docs/interop.md).

An imported workdir is a base: train from it with ``--config configs/hf.py:W`` (its own config, with
``init_from`` set to it) or with a paper's config and ``--config.init_from=W``; ``eval``, ``moe``,
``compile`` and ``params`` take it like any workdir.
"""
from __future__ import annotations

import time

from edge_jax.errors import UserError
from edge_jax.utils.args import at_least, output_dir, trained_workdir
from edge_jax.utils.extras import require


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="hf_command", required=True)
    p = sub.add_parser("import", help="an HF checkpoint directory (or hub id) as a new edge_jax workdir")
    p.add_argument("src", help="HF checkpoint directory: config.json, *.safetensors (sharded or not), tokenizer "
                               "files; or a hub id where the network allows")
    p.add_argument("--workdir", required=True, help="the new workdir (must not exist or be empty)")
    p.add_argument("--check", action="store_true", help="then compare logits with transformers (float32, CPU) "
                                                        "on random sequences and print max |Δ logits|")
    p.set_defaults(fn=run_import, joins_job=False)  # a conversion on one host, not one process of a job
    p = sub.add_parser("export", help="a workdir's params as an HF checkpoint directory transformers loads")
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", required=True, help="the new HF checkpoint directory (must not exist or be empty)")
    p.add_argument("--step", type=at_least(0), default=0, help="checkpoint step (0 = the newest)")
    p.add_argument("--memory-tables", action="store_true", help="a model with a token-indexed memory (MeKi, PLE, "
                   "Engram): write the decoder for transformers and the memory's inference form beside it, which "
                   "only edge-jax hf import reads back")
    p.add_argument("--check", action="store_true", help="then load it with transformers and compare logits "
                                                        "(a model without a memory)")
    p.set_defaults(fn=run_export, joins_job=False)


def _check(hf_dir: str, workdir: str) -> None:
    from edge_jax.hf.check import compare, report
    from edge_jax.train.init_from import restore_params
    from edge_jax.train.setup import model_config

    params, config = restore_params(workdir)
    print(report(compare(hf_dir, model_config(config), params)), flush=True)


def run_import(args, overrides) -> int:
    from edge_jax.hf.importer import import_checkpoint

    output_dir(args.workdir, "--workdir")
    if args.check:  # before any work: the comparison needs them
        for package in ("torch", "transformers"):
            require(package, "hf import --check")
    t0 = time.perf_counter()
    record = import_checkpoint(args.src, args.workdir)
    print(f"imported {record['family']} ({record['params']:,} params, {record['dtype']}) from {record['source']} "
          f"into {args.workdir} in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.check:
        _check(record["directory"], args.workdir)
    return 0


def run_export(args, overrides) -> int:
    from edge_jax.hf.exporter import export_workdir

    trained_workdir(args.workdir)
    output_dir(args.out, "--out")
    if args.check and args.memory_tables:
        raise UserError("--check compares with transformers, which runs no memory; drop --check and import the "
                        "export (edge-jax hf import) to run it with edge_jax")
    if args.check:
        for package in ("torch", "transformers"):
            require(package, "hf export --check")
    out = export_workdir(args.workdir, args.out, args.step, memory_tables=args.memory_tables)
    print(f"exported {args.workdir} as {out['family']}: {out['tensors']} tensors, {out['bytes'] / 2**20:.1f} MiB "
          f"in {out['files']} file(s) to {args.out}"
          + (f", and {out['memory_tables']} memory tensors beside them (read back by edge-jax hf import only)"
             if out["memory_tables"] else ""), flush=True)
    if args.check:
        _check(args.out, args.workdir)
    return 0
