"""``edge-jax docs``: rewrite the generated blocks of README.md and docs/*.md from the records.

    edge-jax docs [--check] [--root .] [--results results] [--ablations ablations] [FILE ...]

Without ``--check`` each file whose blocks differ is rewritten (atomically) and named; with it nothing is
written and each block that differs is named, exit 1. A block's sources are in
:mod:`edge_jax.docgen.sources`.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from edge_jax.docgen import blocks
from edge_jax.utils.atomic import write_text_atomic


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", help="markdown files (default: README.md and docs/*.md under --root)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each block that differs from what the records give")
    parser.add_argument("--root", default=".", help="the repository (default: .)")
    parser.add_argument("--results", default="results", help="grid outputs under --root (default: results)")
    parser.add_argument("--ablations", default="ablations", help="ablation files under --root (default: ablations)")
    parser.add_argument("--preset", default="tiny", help="the grids' preset (default: tiny)")


def check_files(paths: list[Path], src) -> list[blocks.Stale]:
    """The blocks of ``paths`` that differ from what ``src`` gives."""
    stale = []
    for path in paths:
        stale += blocks.fill(path.read_text(encoding="utf-8"), src, str(path))[1]
    return stale


def run(args: argparse.Namespace) -> int:
    from edge_jax.docgen import sources
    root = Path(args.root)
    if not root.is_dir():
        raise blocks.DocBlockError(f"--root {root} is not a directory; pass the repository's path")
    paths = [Path(f) for f in args.files] or blocks.files(root)
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise blocks.DocBlockError(f"no file {missing[0]}; pass markdown files that exist")
    src = sources.Sources(root, args.results, args.ablations, args.preset)
    if args.check:
        stale = check_files(paths, src)
        for s in stale:
            print(f"{s.block.where}: block '{s.block.spec}' differs from what the records give; run edge-jax docs")
        print(f"edge-jax docs: {len(stale)} block(s) differ" if stale else "edge-jax docs: every block is as "
              "the records give")
        return 1 if stale else 0
    for path in paths:
        text, stale = blocks.fill(path.read_text(encoding="utf-8"), src, str(path))
        if stale:
            write_text_atomic(path, text)
            print(f"edge-jax docs: {path}: rewrote {len(stale)} block(s): "
                  + ", ".join(f"line {s.block.line} '{s.block.spec}'" for s in stale))
    return 0
