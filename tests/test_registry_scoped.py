"""``Registry.override`` registers for one block and leaves the registry as it found it, and the guard of
tests/conftest.py (``registries_left_as_found``, through :class:`conftest.RegistrySnapshot`) names a registry
a test changed."""
import gc

import pytest
from conftest import RegistrySnapshot

from edge_jax.registry import EVALUATORS, SECTIONS, Registry


def _filled() -> Registry:
    reg = Registry("test fruit", key="test.fruit")
    for name, value in (("pear", 3), ("apple", 1), ("fig", 2)):
        reg.register(name, value)
    return reg


def test_override_registers_for_the_block_then_restores_order_and_content():
    reg = _filled()
    before = reg.items()
    marker = object()
    with reg.override("kiwi", marker) as got:
        assert got is marker and reg.get("kiwi") is marker
        assert reg.names() == ("pear", "apple", "fig", "kiwi")  # last, like a registration
        with reg.override("apricot", 5):  # nested blocks unwind in turn
            assert reg.names()[-2:] == ("kiwi", "apricot")
        assert reg.names() == ("pear", "apple", "fig", "kiwi")
    assert reg.items() == before and "kiwi" not in reg
    reg.register("kiwi", 7)  # the name is free again
    assert reg.names() == ("pear", "apple", "fig", "kiwi")


def test_override_restores_when_the_block_raises():
    reg = _filled()
    before = reg.items()
    with pytest.raises(RuntimeError, match="inside the block"):
        with reg.override("kiwi", 4):
            assert reg.get("kiwi") == 4
            raise RuntimeError("inside the block")
    assert reg.items() == before


def test_override_of_a_registered_name_is_the_register_error_and_changes_nothing():
    reg = _filled()
    before = reg.items()
    with pytest.raises(ValueError, match="^test fruit 'apple' is registered twice; pick another name$"):
        with reg.override("apple", 9):
            pytest.fail("the block must not run")
    assert reg.items() == before and reg.get("apple") == 1
    with reg.override("kiwi", 4):
        with pytest.raises(ValueError, match="'kiwi' is registered twice"):
            reg.register("kiwi", 5)
    assert reg.items() == before


def test_what_others_register_inside_the_block_stays():
    """A module imported inside the block registers once per process: its names must outlive the block."""
    reg = _filled()
    with reg.override("kiwi", 4):
        reg.register("lime", 6)
    assert reg.names() == ("pear", "apple", "fig", "lime")


def test_instances_lists_every_live_registry_in_creation_order():
    found = Registry.instances()
    assert EVALUATORS in found and SECTIONS in found
    assert found.index(SECTIONS) < found.index(EVALUATORS)  # as edge_jax/registry.py defines them
    a, b = Registry("test first"), Registry("test second")
    assert Registry.instances()[-2:] == [a, b]
    del a
    gc.collect()
    axes = [r.axis for r in Registry.instances()]
    assert "test first" not in axes and axes[-1] == "test second"  # one no one holds is not kept alive


def test_the_guard_names_a_leaked_registration_and_passes_after_cleanup():
    before = RegistrySnapshot()
    assert before.changes() == ""
    EVALUATORS.register("test_leaked", object())
    try:
        assert before.changes() == "'evaluator' left ['test_leaked']"
    finally:
        del EVALUATORS._items["test_leaked"]  # the cleanup the guard asks for (override would have done it)
    assert before.changes() == ""
    with SECTIONS.override("test_scoped", object()):
        assert before.changes() == "'config section' left ['test_scoped']"
    assert before.changes() == ""


def test_the_guard_names_a_lost_or_reordered_name():
    reg = _filled()
    before = RegistrySnapshot()
    saved = dict(reg._items)
    try:
        del reg._items["apple"]
        assert before.changes() == "'test fruit' lost ['apple']"
        reg._items["apple"] = 1
        assert before.changes() == "'test fruit' reordered"
        reg._items["kiwi"] = 4
        assert before.changes() == "'test fruit' left ['kiwi']"
        del reg._items["fig"]
        assert before.changes() == "'test fruit' left ['kiwi'] lost ['fig']"
    finally:
        reg._items.clear()
        reg._items.update(saved)
    assert before.changes() == ""
