"""Find the generated blocks of a markdown file, fill them from the records, and say which differ.

A block opens with ``<!-- edge-jax docs: KIND ARG ... KEY=VALUE ... -->`` and closes with the next
``<!-- /edge-jax docs -->`` (the close may repeat the kind after a colon, for long blocks). Inline blocks
hold a number inside a sentence; a block whose opening marker ends its line holds whole lines (a table).
"""
from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path
from typing import Callable

from edge_jax import registry
from edge_jax.errors import ConfigError, UserError

OPEN = re.compile(r"<!-- edge-jax docs: (?P<spec>.*?)\s*-->", re.S)
CLOSE = re.compile(r"<!-- /edge-jax docs(?:: .*?)? -->", re.S)
ANY = re.compile(r"<!-- */? *edge-jax docs")


class DocBlockError(UserError):
    """A marker that cannot be filled: unclosed, an unknown kind, bad arguments, a source that is missing."""


@dataclasses.dataclass(frozen=True)
class Block:
    path: str      # the markdown file, as given
    line: int      # 1-based line of the opening marker
    spec: str      # what the opening marker says: kind, arguments
    start: int     # offset of the body (after the opening marker)
    end: int       # offset of the closing marker
    body: str      # the text between the markers now

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def multiline(self) -> bool:
        return self.body.startswith("\n")


CODE = re.compile(r"^(```|~~~).*?^\1[^\n]*$|`[^`\n]+`", re.M | re.S)


def _code_hidden(text: str) -> str:
    """``text`` with its code (fenced blocks, inline spans) blanked, offsets kept: a marker shown as code
    (in docs that explain the markers) is not a block."""
    return CODE.sub(lambda m: "".join(c if c == "\n" else " " for c in m[0]), text)


def find(text: str, path: str = "<text>") -> list[Block]:
    """Every block of ``text`` outside code, in order; a one-line :class:`DocBlockError` for a marker left
    open."""
    blocks, pos, seen, used = [], 0, _code_hidden(text), set()
    while (m := OPEN.search(seen, pos)):
        line = text.count("\n", 0, m.start()) + 1
        close = CLOSE.search(seen, m.end())
        nested = OPEN.search(seen, m.end())
        if close is None or (nested and nested.start() < close.start()):
            raise DocBlockError(f"{path}:{line}: block '{m['spec']}' is not closed; add <!-- /edge-jax docs --> "
                                f"after its text")
        spec = " ".join(text[m.start("spec"):m.end("spec")].split())  # as written: code spans are not hidden here
        blocks.append(Block(path, line, spec, m.end(), close.start(), text[m.end():close.start()]))
        pos = close.end()
        used |= {m.start(), close.start()}
    stray = [m.start() for m in ANY.finditer(seen) if m.start() not in used]
    if stray:  # a misspelt marker, or a close without its open
        raise DocBlockError(f"{path}:{text.count(chr(10), 0, stray[0]) + 1}: a docs marker that opens or closes no "
                            f"block; write <!-- edge-jax docs: KIND ... -->text<!-- /edge-jax docs -->")
    return blocks


def parse_spec(spec: str, where: str) -> tuple[str, list[str], dict[str, str]]:
    """``kind arg ... key=value ...`` -> (kind, args, options)."""
    try:
        words = shlex.split(spec)
    except ValueError as e:
        raise DocBlockError(f"{where}: cannot read block '{spec}': {e}") from None
    if not words:
        raise DocBlockError(f"{where}: a block marker without a kind; write <!-- edge-jax docs: KIND ... -->")
    args = [w for w in words[1:] if "=" not in w]
    options = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    return words[0], args, options


def render(block: Block, ctx) -> str:
    """The body the records give for ``block`` (with the newlines of a multi-line block)."""
    kind, args, options = parse_spec(block.spec, block.where)
    try:
        fn: Callable = registry.DOC_BLOCKS.get(kind)
    except ConfigError as e:
        raise DocBlockError(f"{block.where}: {e}") from None
    try:
        text = str(fn(ctx, *args, **options))
    except DocBlockError as e:
        raise DocBlockError(f"{block.where}: {e}") from None
    except TypeError as e:
        raise DocBlockError(f"{block.where}: block '{block.spec}' has the wrong arguments ({e}); see "
                            f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}") from None
    return f"\n{text.strip(chr(10))}\n" if block.multiline else text.strip()


@dataclasses.dataclass(frozen=True)
class Stale:
    block: Block
    want: str


def fill(text: str, ctx, path: str = "<text>") -> tuple[str, list[Stale]]:
    """``text`` with every block rewritten from the records, and the blocks that changed."""
    out, stale, pos = [], [], 0
    for block in find(text, path):
        want = render(block, ctx)
        out += [text[pos:block.start], want]
        pos = block.end
        if want != block.body:
            stale.append(Stale(block, want))
    out.append(text[pos:])
    return "".join(out), stale


def files(root: Path) -> list[Path]:
    """The documents that may hold blocks: README.md and docs/*.md."""
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]
