"""A detached cluster's kept history (detached/kepthistory.py): the keeper's list and the
pushed values kept owner-only in the cluster's private folder, loaded only from there."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from dist_notebook.cluster.spec import ClusterSpec
from dist_notebook.detached.kepthistory import (
    FOLDER,
    KeptHistory,
    KeptValueError,
    keep_values,
    load_value,
)
from dist_notebook.magics.history import Engines, KeptValues, _from_kept


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    folder = tmp_path / "cluster-abc"
    folder.mkdir(mode=0o700)
    return folder


def test_the_keeper_numbers_entries_in_order_and_names_their_kernel() -> None:
    history = KeptHistory()
    assert history.add(11, {"kind": "dist", "key": "dist:id:a", "code": "x = 1"}) == 1
    assert history.add(12, {"kind": "push", "key": "push:lr", "code": "lr"}) == 2
    assert [(e["seq"], e["kernel"], e["kind"]) for e in history.entries] == [
        (1, 11, "dist"),
        (2, 12, "push"),
    ]


@pytest.mark.parametrize(
    "entry",
    [None, [], {"kind": "shell", "key": "k", "code": ""}, {"kind": "dist", "key": "k"}],
)
def test_the_keeper_refuses_what_is_no_entry(entry: object) -> None:
    with pytest.raises(ValueError, match="history entry"):
        KeptHistory().add(1, entry)


def test_a_pushed_value_is_kept_owner_only_and_loaded_back(profile: Path) -> None:
    value = {"lr": 0.1, "lock": threading.Lock}  # a class: pickled, no literal
    entry = keep_values(str(profile), {"kind": "push", "code": "cfg"}, {"cfg": value})
    kept = entry["values"]["cfg"]
    path = profile / FOLDER / kept["file"]
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.lstat(profile / FOLDER).st_mode) == 0o700
    assert load_value(str(profile), kept) == value
    assert KeptValues(str(profile), entry["values"])["cfg"] == value


def test_a_value_that_cannot_be_pickled_is_named_at_export(profile: Path) -> None:
    import socket

    with socket.socket() as s:
        entry = keep_values(str(profile), {}, {"sock": s})
    assert "unkept" in entry["values"]["sock"]
    from dist_notebook.batch.script import ExportError

    with pytest.raises(ExportError, match="'sock' an earlier kernel pushed cannot be loaded"):
        KeptValues(str(profile), entry["values"])["sock"]


def test_a_kept_value_is_loaded_only_from_a_private_file_of_ours(profile: Path) -> None:
    kept = keep_values(str(profile), {}, {"x": 1})["values"]["x"]
    path = profile / FOLDER / kept["file"]
    path.chmod(0o644)
    with pytest.raises(KeptValueError, match="not a private file of yours"):
        load_value(str(profile), kept)
    path.chmod(0o600)
    link = profile / FOLDER / "push-link.pkl"
    link.symlink_to(path)
    with pytest.raises(KeptValueError, match="not a private file of yours"):
        load_value(str(profile), {"file": link.name})
    with pytest.raises(KeptValueError, match="not one of ours"):
        load_value(str(profile), {"file": "../keeper.json"})
    (profile / FOLDER).chmod(0o777)
    with pytest.raises(KeptValueError, match="can be written by other users"):
        load_value(str(profile), kept)
    (profile / FOLDER).chmod(0o700)
    path.unlink()
    with pytest.raises(KeptValueError, match="is gone"):
        load_value(str(profile), kept)


def test_an_entry_comes_back_from_the_keepers_json(profile: Path) -> None:
    spec = ClusterSpec(n=2, threads=1)
    engines = Engines("abc", (101, 102), spec, "gloo", ("cpu", "cpu"))
    assert Engines.from_json(engines.to_json()) == engines
    train = {
        "kind": "train",
        "key": "train:id:t",
        "code": "pass",
        "count": 4,
        "ranks": [0],
        "engines": engines.to_json(),
        "train_spec": {"code": "pass", "name": "r", "steps": 3, "ranks": [0]},
        "run": {"id": "run1", "name": "r"},
        "seq": 9,
        "kernel": 4242,
    }
    entry = _from_kept(train, str(profile), seq=3)
    assert (entry.seq, entry.kernel, entry.ranks, entry.count) == (3, 4242, (0,), 4)
    assert entry.train_spec.ranks == (0,) and entry.train_spec.steps == 3
    assert (entry.run.id, entry.run.name) == ("run1", "r")


def test_the_export_says_which_cells_an_earlier_kernel_ran() -> None:
    from dist_notebook.batch.export import _other_kernels
    from dist_notebook.batch.script import Part, Plan

    earlier = Part("dist", "x = 1", 3, kernel=77)
    push = Part("push", "", 2, name="lr", kernel=77)
    assert earlier.label == "%%dist (In [3] of kernel pid 77)"
    plan = Plan([push, earlier], Part("train", "pass", 1), [])
    assert _other_kernels(plan) == [
        "%dist_push (In [2]) lr, %%dist (In [3]) ran in kernel pid 77, before this kernel attached"
    ]
    assert _other_kernels(Plan([], Part("train", "pass", 1), [])) == []


def test_the_keeper_lets_the_oldest_go_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from dist_notebook.detached import kepthistory

    monkeypatch.setattr(kepthistory, "MAX_BYTES", 1000)
    history = KeptHistory()
    for i in range(10):
        history.add(1, {"kind": "dist", "key": f"k{i}", "code": "x" * 300})
    assert [e["key"] for e in history.entries] == ["k8", "k9"]
    assert history.add(1, {"kind": "dist", "key": "k10", "code": ""}) == 11
