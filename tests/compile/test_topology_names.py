"""Every ``--topology`` name the compile command lists is one libtpu builds, and a name it does not
list is refused in one line that gives the valid ones."""
import math

import pytest
from helpers import needs_extra

from edge_jax.cli import main
from edge_jax.compile import gpus
from edge_jax.compile.chips import CHIPS, cloud_names, host_bounds, known_topologies, make_target, slice_shape

TPU_NAMES = [n for n in known_topologies() if n not in ("cpu:N", "local") and gpus.parse(n) is None]


def test_listed_names_parse_to_a_shape_with_the_named_chip_count():
    for name in TPU_NAMES:
        gen, shape = slice_shape(name)
        chips = math.prod(int(x) for x in shape.split("x"))
        assert chips * CHIPS[gen].cores_per_chip == int(name.split("-")[1]), name
    assert {"v5e-1", "v6e-1", "v5p-8", "v4-8"} <= set(TPU_NAMES)


def test_host_bounds_are_2x2x1_except_along_odd_sides():
    assert host_bounds([16, 16]) == host_bounds([4, 4, 8]) == (2, 2, 1)
    assert host_bounds([1, 1]) == (1, 1, 1) and host_bounds([1, 2]) == (1, 2, 1)
    assert host_bounds([3, 3, 3]) == (1, 1, 1)


@needs_extra("libtpu")
@pytest.mark.tpu_compile
def test_libtpu_builds_every_listed_topology():
    for name in TPU_NAMES:  # each is a topology description, no compile: well under a second for all
        gen, shape = slice_shape(name)
        target = make_target(name)
        assert len(target.devices) == math.prod(int(x) for x in shape.split("x")), name
        assert target.name == name and target.chip is CHIPS[gen]


@pytest.mark.parametrize("name,valid", [
    ("v7x-8", [f"{gen}-" + "|".join(n.split("-")[1] for n in cloud_names(gen)) for gen in CHIPS]),
    ("tpu-v5e", ["v5e-1|4|8|16|32|64|128|256", "v4-8|16|", "cpu:N", "local"]),
    ("v5e-2", [", ".join(cloud_names("v5e"))]), ("v5p-6", [", ".join(cloud_names("v5p"))])])
def test_an_unlisted_name_is_one_line_with_the_valid_ones(name, valid, capsys):
    assert main(["compile", "--config", "configs/lm.py:size=tiny", "--topology", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("edge-jax: error: ") and repr(name) in err, err
    for names in valid:
        assert names in err, (names, err)
