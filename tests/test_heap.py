"""A started process's objects leave the garbage collector's walks; its garbage does not stay."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from agentpost.heap import settle


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture
def thawed_afterwards() -> Iterator[None]:
    yield
    gc.unfreeze()  # the test process goes on collecting its own objects


def test_settle_collects_the_starts_garbage_and_freezes_what_lives(thawed_afterwards: None) -> None:
    garbage = Node()
    gone = weakref.ref(garbage)
    del garbage
    kept = Node()
    settle()
    assert gone() is None  # never frozen for the life of the process
    assert gc.get_freeze_count() > 0
    assert not any(obj is kept for obj in gc.get_objects())  # no collection walks it again
