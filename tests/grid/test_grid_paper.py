"""PaperGrid: a paper's presets, base config specs and standing notes, as its grid module states them."""
import pytest

from edge_jax.grid.paper import PaperGrid

GRID = PaperGrid({"tiny": "configs/x.py:size=tiny", "paper": "configs/x.py:size=big"}, notes={"tiny": "Tiny notes."})


def test_presets_base_and_notes():
    assert GRID.presets == ("tiny", "paper")
    assert GRID.base("paper") == "configs/x.py:size=big"
    assert GRID.base("tiny", "stage=base") == "configs/x.py:size=tiny,stage=base"
    assert PaperGrid({"tiny": "configs/c.py"}).base("tiny", "policy=none") == "configs/c.py:policy=none"
    assert GRID.notes("tiny", "Own text.") == "Own text. Tiny notes."
    assert GRID.notes("tiny", "") == "Tiny notes." and GRID.notes("paper", "Own text.") == "Own text."


@pytest.mark.parametrize("call", [GRID.check, GRID.base, lambda p: GRID.notes(p, "x")])
def test_an_unknown_preset_is_one_line_naming_the_valid_ones(call):
    with pytest.raises(ValueError, match=r"^unknown preset 'huge'; valid presets: tiny, paper$"):
        call("huge")


def test_notes_for_a_preset_without_a_base_are_refused():
    with pytest.raises(ValueError, match="notes for preset 'papr', which has no base; presets: tiny"):
        PaperGrid({"tiny": "configs/x.py"}, notes={"papr": "typo"})
    with pytest.raises(ValueError, match="at least one preset"):
        PaperGrid({})


def test_the_paper_grids_use_it():
    """Each paper grid module's PRESETS (read by edge_jax.grid.spec.presets_of) are its PaperGrid's."""
    from edge_jax.papers.expert_cache import grid as cache
    from edge_jax.papers.meki import grid as meki
    from edge_jax.papers.npumoe import grid as npumoe
    from edge_jax.papers.plm import grid as plm
    for module in (meki, plm, npumoe, cache):
        assert isinstance(module.GRID, PaperGrid) and module.PRESETS == module.GRID.presets
    assert plm.base("paper") == "configs/plm.py:size=1p8b" and cache.BASE == "configs/cache.py"
