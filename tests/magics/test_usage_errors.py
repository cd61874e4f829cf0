"""Every mistake a user can make with the magics gives a UsageError that names the fix."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from IPython.core.error import UsageError

from dist_notebook.magics.cluster_magics import ClusterMagics, build_spec

pytestmark = pytest.mark.timeout(60)


def usage_error(run: Any, *args: str) -> str:
    with pytest.raises(UsageError) as info:
        run(*args)
    return str(info.value)


# --- %dist_cluster start: flags checked before anything starts ------------------------


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        ("0", "0 must be 1 or more"),
        ("-1", "-1 must be 1 or more"),
        ("abc", "'abc' is not a whole number"),
    ],
)
def test_bad_rank_count(no_cluster: Any, value: str, fix: str) -> None:
    message = usage_error(no_cluster.run_line_magic, "dist_cluster", f"start -n {value} --cpu")
    assert f"argument -n: {fix}" in message


def test_unknown_action_lists_the_actions(no_cluster: Any) -> None:
    message = usage_error(no_cluster.run_line_magic, "dist_cluster", "launch")
    assert "choose from 'start', 'status', 'stop', 'restart'" in message


def test_unknown_flag(no_cluster: Any) -> None:
    message = usage_error(no_cluster.run_line_magic, "dist_cluster", "start --nodez 2")
    assert "unrecognized arguments: --nodez 2" in message
    assert "usage: %dist_cluster" in message


def test_gpus_and_cpu_together(no_cluster: Any) -> None:
    message = usage_error(no_cluster.run_line_magic, "dist_cluster", "start --gpus 0 --cpu")
    assert "not allowed with argument" in message


def flags(**given: Any) -> SimpleNamespace:
    """The flags of ``%dist_cluster start`` with their defaults, some of them changed."""
    values = vars(ClusterMagics.dist_cluster.parser.parse_args(["start"]))
    values.update(given)
    return SimpleNamespace(**values)


def test_unknown_gpu_id_lists_the_visible_ones() -> None:
    with pytest.raises(UsageError, match="unknown GPU id 7: visible GPUs are 0,1"):
        build_spec(flags(gpus=[0, 7]), gpus_here=[0, 1])


def test_gpus_where_there_are_none() -> None:
    with pytest.raises(UsageError, match=r"no GPU is visible here: use --cpu"):
        build_spec(flags(gpus=[0]), gpus_here=[])


def test_more_ranks_than_gpus() -> None:
    with pytest.raises(UsageError, match=r"use -n 2, or --cpu for CPU ranks"):
        build_spec(flags(n=3), gpus_here=[0, 1])


def test_gpu_count_mismatch_comes_from_the_spec() -> None:
    with pytest.raises(UsageError, match=r"give one GPU per rank, e.g. --gpus 0,1,2"):
        build_spec(flags(n=3, gpus=[0, 1]), gpus_here=[0, 1])


def test_gpus_on_this_host_without_gpus(no_cluster: Any) -> None:
    from conftest import gpu_count

    if gpu_count():
        pytest.skip("this host has GPUs")
    message = usage_error(no_cluster.run_line_magic, "dist_cluster", "start --gpus 0")
    assert "use --cpu (gloo) instead" in message


def test_nccl_without_gpus(no_cluster: Any) -> None:
    message = usage_error(no_cluster.run_line_magic, "dist_cluster", "start --backend nccl --cpu")
    assert "--backend nccl needs GPUs" in message and "use --backend gloo or --cpu" in message


def test_bad_timeout(no_cluster: Any) -> None:
    message = usage_error(no_cluster.run_line_magic, "dist_cluster", "start --cpu --timeout 0")
    assert "must be a positive number of seconds" in message


def test_start_while_running(shell: Any, cluster2: Any) -> None:
    message = usage_error(shell.run_line_magic, "dist_cluster", "start -n 3 --cpu")
    assert "use %dist_cluster restart, or %dist_cluster stop first" in message


# --- no cluster -------------------------------------------------------------------------

START = "start one with %dist_cluster start"


def test_dist_without_cluster(no_cluster: Any) -> None:
    assert START in usage_error(no_cluster.run_cell_magic, "dist", "", "print(1)")


def test_push_without_cluster(no_cluster: Any) -> None:
    no_cluster.user_ns["lr"] = 0.1
    assert START in usage_error(no_cluster.run_line_magic, "dist_push", "lr")


def test_pull_without_cluster(no_cluster: Any) -> None:
    assert START in usage_error(no_cluster.run_line_magic, "dist_pull", "rank")


def test_run_without_cluster(no_cluster: Any, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    assert START in usage_error(no_cluster.run_line_magic, "dist_run", str(script))


def test_restart_without_cluster(no_cluster: Any) -> None:
    assert START in usage_error(no_cluster.run_line_magic, "dist_cluster", "restart")


def test_status_and_stop_without_cluster_just_say_so(
    no_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    no_cluster.run_line_magic("dist_cluster", "status")
    no_cluster.run_line_magic("dist_cluster", "stop")
    out = capsys.readouterr().out
    assert START in out and "no cluster is running" in out


# --- a running cluster, wrong arguments -------------------------------------------------


def test_unknown_rank_in_ranks(shell: Any, cluster2: Any) -> None:
    message = usage_error(shell.run_cell_magic, "dist", "--ranks 5", "print(1)")
    assert "unknown rank 5: this cluster has ranks 0..1; fix --ranks" in message


def test_unknown_rank_in_pull(shell: Any, cluster2: Any) -> None:
    message = usage_error(shell.run_line_magic, "dist_pull", "rank --rank 9")
    assert "unknown rank 9: this cluster has ranks 0..1; fix --rank" in message
    message = usage_error(shell.run_line_magic, "dist_pull", "rank --rank -1")
    assert "unknown rank -1" in message


def test_bad_ranks_list(shell: Any, cluster2: Any) -> None:
    message = usage_error(shell.run_cell_magic, "dist", "--ranks one", "print(1)")
    assert "write it like 0,1,2" in message


def test_unknown_flag_of_dist(shell: Any, cluster2: Any) -> None:
    message = usage_error(shell.run_cell_magic, "dist", "--rank 0", "print(1)")
    assert "unrecognized arguments: --rank 0" in message
    assert re.search(r"usage: %%dist .*--ranks", message)


def test_pull_rank_and_all_together(shell: Any, cluster2: Any) -> None:
    message = usage_error(shell.run_line_magic, "dist_pull", "rank --all --rank 1")
    assert "not allowed with argument" in message


def test_push_of_an_undefined_name(shell: Any, cluster2: Any) -> None:
    shell.user_ns.pop("never_defined", None)
    message = usage_error(shell.run_line_magic, "dist_push", "never_defined")
    assert "no variable named 'never_defined' in the notebook; define it first" in message


def test_push_of_nothing(shell: Any, cluster2: Any) -> None:
    assert "name the variables to send" in usage_error(shell.run_line_magic, "dist_push", "")


def test_run_script_not_found(shell: Any, cluster2: Any, tmp_path: Path) -> None:
    message = usage_error(shell.run_line_magic, "dist_run", str(tmp_path / "missing.py"))
    assert "script not found" in message and "missing.py" in message


def test_run_without_a_script(shell: Any, cluster2: Any) -> None:
    assert "name a script" in usage_error(shell.run_line_magic, "dist_run", "")


@pytest.mark.parametrize(
    ("kind", "name", "line"),
    [
        ("cell", "dist", '--ranks "0'),
        ("line", "dist_pull", "'rank"),
        ("line", "dist_run", 'train.py "--lr'),
    ],
)
def test_bad_quotes(shell: Any, cluster2: Any, kind: str, name: str, line: str) -> None:
    if kind == "cell":
        message = usage_error(shell.run_cell_magic, name, line, "print(1)")
    else:
        message = usage_error(shell.run_line_magic, name, line)
    assert "check the quotes" in message


def test_bad_timeout_of_dist(shell: Any, cluster2: Any) -> None:
    message = usage_error(shell.run_cell_magic, "dist", "--timeout -1", "print(1)")
    assert "positive number of seconds" in message


# --- a misspelt flag or subcommand: "did you mean" ----------------------------------------


def test_misspelt_subcommand(no_cluster: Any) -> None:
    message = usage_error(no_cluster.run_line_magic, "dist_cluster", "strat -n 2 --cpu")
    assert "invalid choice: 'strat'" in message and "did you mean start?" in message


def test_misspelt_flag_of_dist_cluster(no_cluster: Any) -> None:
    message = usage_error(no_cluster.run_line_magic, "dist_cluster", "start --cpus")
    assert message.splitlines()[0].endswith("unrecognized arguments: --cpus; did you mean --cpu?")


def test_misspelt_flag_of_dist_train(no_cluster: Any) -> None:
    # Before any cluster is needed: the flags are read first.
    message = usage_error(no_cluster.run_cell_magic, "dist_train", "--stpes 10", "pass")
    assert "did you mean --steps?" in message


def test_misspelt_choice_of_a_flag(no_cluster: Any) -> None:
    message = usage_error(no_cluster.run_line_magic, "dist_cluster", "start --backend glo")
    assert "did you mean gloo?" in message
