"""What every paper's grid module (``edge_jax/papers/<paper>/grid.py``) repeats: its presets, the base
config spec of each, and the notes every one of its grids carries at a preset.

    GRID = PaperGrid({"tiny": "configs/plm.py:size=tiny", "paper": "configs/plm.py:size=1p8b"},
                     notes={"tiny": TINY_NOTES})
    PRESETS = GRID.presets   # what edge_jax.grid.spec.presets_of reads from the paper's grid module

    GRID.check("huge")               # ValueError: unknown preset 'huge'; valid presets: tiny, paper
    GRID.base("tiny")                # 'configs/plm.py:size=tiny'
    GRID.base("tiny", "stage=base")  # 'configs/plm.py:size=tiny,stage=base'
    GRID.notes("tiny", "A grid's own text.")  # its own text, then the preset's standing notes
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping


class PaperGrid:
    """One paper's presets: ``bases`` maps each preset (in order) to its base config spec
    (``path.py`` or ``path.py:arg``); ``notes`` maps a preset to the text every grid of the paper
    adds after its own notes at that preset (none for a preset not in it)."""

    def __init__(self, bases: Mapping[str, str], notes: Mapping[str, str] | None = None):
        if not bases:
            raise ValueError("PaperGrid needs at least one preset; pass {preset: config spec}")
        stray = sorted(set(notes or {}) - set(bases))
        if stray:
            raise ValueError(f"notes for preset {stray[0]!r}, which has no base; presets: {', '.join(bases)}")
        self.bases = MappingProxyType(dict(bases))
        self.notes_by_preset = MappingProxyType(dict(notes or {}))

    def __repr__(self) -> str:
        return f"PaperGrid({dict(self.bases)!r}, notes for {list(self.notes_by_preset)})"

    @property
    def presets(self) -> tuple[str, ...]:
        return tuple(self.bases)

    def check(self, preset: str) -> None:
        """A one-line ValueError for a preset the paper does not have."""
        if preset not in self.bases:
            raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(self.presets)}")

    def base(self, preset: str, arg: str = "") -> str:
        """The preset's config spec, with ``arg`` (``key=value,...``) added to its argument."""
        self.check(preset)
        spec = self.bases[preset]
        if not arg:
            return spec
        return f"{spec}{',' if ':' in spec else ':'}{arg}"

    def notes(self, preset: str, text: str = "") -> str:
        """A grid's ``text``, then the preset's standing notes (either may be empty)."""
        self.check(preset)
        return " ".join(t for t in (text, self.notes_by_preset.get(preset, "")) if t)
