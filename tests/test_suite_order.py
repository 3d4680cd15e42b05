"""The order the README's `pytest -n 2` hands out files in (tests/conftest.py): each file whole, the files of a test
marked `slow(first=True)` first, then those of any slow test, then the rest, each group in collection order."""
import pathlib

import pytest

from tests.conftest import pytest_collection_modifyitems


class Item:
    """What the hook reads of a collected test."""

    def __init__(self, path: str, name: str, slow=None):
        self.path, self.name, self.fixturenames = pathlib.Path(path), name, ()
        self.slow = slow

    def get_closest_marker(self, name):
        return self.slow if name == "slow" else None

    def iter_markers(self, name):
        return iter(())

    def add_marker(self, mark):
        pass


def test_files_of_a_first_test_lead_then_slow_files_then_the_rest_each_whole():
    slow, first = pytest.mark.slow.mark, pytest.mark.slow(first=True).mark
    items = [Item("a.py", "quick"), Item("b.py", "long", slow), Item("c.py", "quick"), Item("c.py", "job", first),
             Item("d.py", "quick"), Item("e.py", "job", first), Item("e.py", "quick"), Item("b.py", "quick")]
    pytest_collection_modifyitems(items)
    assert [(str(item.path), item.name) for item in items] == [
        ("c.py", "quick"), ("c.py", "job"), ("e.py", "job"), ("e.py", "quick"), ("b.py", "long"), ("b.py", "quick"),
        ("a.py", "quick"), ("d.py", "quick")]
