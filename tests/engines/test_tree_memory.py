"""The memory of a process tree (``impl.process.tree_memory``), on a real tree: this
process and a child holding 300 MB of its own pages and a 200 MB file mapped by both.

The file's pages count once in the proportional set sizes summed over the tree, twice
in the resident sizes; ``tree_peak`` reads the cheap resident sizes first and walks the
page tables (``smaps_rollup``) only when they could hold a new peak."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from impl.process import lifeline, tree_memory

MB = 1_000_000
OWN, SHARED = 300 * MB, 200 * MB
CHILD = """
import mmap, sys
own = bytearray(int(sys.argv[1]))
for i in range(0, len(own), 4096):
    own[i] = 1
with open(sys.argv[2], "rb") as f:
    shared = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
touched = sum(shared[i] for i in range(0, len(shared), 4096))
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    """A child holding ``OWN`` bytes and the ``SHARED`` file, which this process maps too."""
    path = tmp_path_factory.mktemp("tree") / "shared.bin"
    path.write_bytes(b"\1" * SHARED)
    proc = lifeline.spawn([sys.executable, "-c", CHILD, str(OWN), str(path)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    with Path(path).open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as shared:
        sum(shared[i] for i in range(0, len(shared), 4096))  # resident in this process too
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
        proc.communicate("")


def test_a_child_is_in_its_parents_tree(tree: subprocess.Popen[str]) -> None:
    assert tree.pid in tree_memory.descendants(os.getpid())


def test_shared_pages_count_once_in_the_tree_and_twice_in_its_resident_sizes(tree) -> None:
    pids = [os.getpid(), *tree_memory.descendants(os.getpid())]
    resident = sum(tree_memory.resident_bytes(p) for p in pids)
    proportional = tree_memory.tree_bytes(os.getpid())
    # the child's proportional size holds its own pages and half the file
    child = tree_memory.proportional_bytes(tree.pid)
    assert OWN + SHARED / 2 - 20 * MB < child < OWN + SHARED / 2 + 60 * MB, child / MB
    assert resident - proportional > SHARED * 0.9, (resident / MB, proportional / MB)


def test_the_peak_is_the_trees_proportional_size_and_is_kept(tree) -> None:
    first = tree_memory.tree_peak(os.getpid(), 0)
    assert abs(first - tree_memory.tree_bytes(os.getpid())) < 20 * MB
    higher = first + 10**12
    assert tree_memory.tree_peak(os.getpid(), higher) == higher


def test_no_page_table_is_walked_while_the_resident_sizes_stay_under_the_peak(tree, monkeypatch) -> None:
    """Under a peak above the resident sizes, nothing reads ``smaps_rollup``; under one
    between the proportional and the resident sizes, the tree is read and the peak kept."""
    resident = sum(
        tree_memory.resident_bytes(p) for p in [os.getpid(), *tree_memory.descendants(os.getpid())]
    )
    proportional = tree_memory.tree_bytes(os.getpid())
    walked: list[int] = []

    def counting(pid: int, real=tree_memory.proportional_bytes) -> int:
        walked.append(pid)
        return real(pid)

    monkeypatch.setattr(tree_memory, "proportional_bytes", counting)
    assert tree_memory.tree_peak(os.getpid(), resident + 100 * MB) == resident + 100 * MB
    assert walked == []
    between = (resident + proportional) // 2
    assert tree_memory.tree_peak(os.getpid(), between) == between
    assert os.getpid() in walked and tree.pid in walked
