"""Run ``edge_jax.cli`` with a Python audit hook that lists every file this process opens for writing
under the directories of ``$AUDIT_ROOTS`` (os.pathsep-separated) into ``$AUDIT_DIR/process<id>.txt``.

    edge-jax launch --processes 2 -- python tests/multihost/audited.py grid ...

The multi-process tests read the lists to check that only process 0 writes shared files.
"""
import os
import sys

ROOTS = [os.path.realpath(r) for r in os.environ["AUDIT_ROOTS"].split(os.pathsep) if r]
WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
seen: set[str] = set()


def audit(event, args):
    if event != "open" or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    path, mode, flags = args[0], args[1], args[2]
    writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (mode is None and flags & WRITES)
    if not writing:
        return
    full = os.path.realpath(os.fsdecode(path))
    if any(full == r or full.startswith(r + os.sep) for r in ROOTS):
        seen.add(full)


def main() -> int:
    log = os.path.join(os.environ["AUDIT_DIR"], f"process{os.environ.get('JAX_PROCESS_ID', '0')}.txt")
    sys.addaudithook(audit)
    from edge_jax.cli import main as cli
    try:
        return cli(sys.argv[1:])
    finally:
        with open(log + ".tmp", "w") as f:  # outside the audited roots
            f.write("".join(f"{p}\n" for p in sorted(seen)))
        os.replace(log + ".tmp", log)


if __name__ == "__main__":
    sys.exit(main())
