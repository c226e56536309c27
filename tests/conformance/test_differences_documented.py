"""Every Lightning test fabricx does not pass is named, with its reason, in the migration guide."""

from __future__ import annotations

from pathlib import Path

from differences import DIFFERENCES, LEFT_OUT, PENDING

_GUIDE = Path(__file__).parents[2] / "docs" / "migrating" / "lightning-fabric.md"


def test_every_difference_is_in_the_migration_guide():
    guide = _GUIDE.read_text()
    missing = [key for key in (*DIFFERENCES, *PENDING, *LEFT_OUT) if f"`{key}`" not in guide]
    assert not missing, f"add these to {_GUIDE.name}'s tables: {missing}"


def test_left_out_tests_are_absent_from_the_ported_files():
    here = Path(__file__).parent
    present = [key for key in LEFT_OUT if f"def {key.split('::')[1]}(" in (here / key.split("::")[0]).read_text()]
    assert not present, f"listed as left out but ported: {present}"


def test_deliberate_differences_name_ported_tests():
    here = Path(__file__).parent
    for key in (*DIFFERENCES, *PENDING):
        file, name = key.split("::")
        assert f"def {name.split('[')[0]}(" in (here / file).read_text(), key
