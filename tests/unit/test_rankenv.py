"""apply_rank_environment: the rank variables an engine gets before torch is imported."""

from __future__ import annotations

from dist_notebook.engine.rankenv import apply_rank_environment


def applied(**env: str) -> dict[str, str]:
    out = dict(env)
    apply_rank_environment(out)
    return out


def test_local_launcher_variables() -> None:
    env = applied(
        DIST_NOTEBOOK_RANK="1",
        DIST_NOTEBOOK_LOCAL_RANK="1",
        DIST_NOTEBOOK_WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        DIST_NOTEBOOK_CPU="1",
    )
    assert env["RANK"] == "1"
    assert env["LOCAL_RANK"] == "1"
    assert env["WORLD_SIZE"] == "2"
    assert env["LOCAL_WORLD_SIZE"] == "2"
    # CPU ranks hide any GPU that happens to be visible.
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_openmpi_variables() -> None:
    env = applied(
        OMPI_COMM_WORLD_RANK="5", OMPI_COMM_WORLD_LOCAL_RANK="1", OMPI_COMM_WORLD_SIZE="8"
    )
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("5", "1", "8")
    assert env["LOCAL_WORLD_SIZE"] == "8"  # nothing better is known: defaults to the world


def test_slurm_variables() -> None:
    env = applied(SLURM_PROCID="3", SLURM_LOCALID="0", SLURM_NTASKS="4", LOCAL_WORLD_SIZE="1")
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("3", "0", "4")
    assert env["LOCAL_WORLD_SIZE"] == "1"


def test_pmi_variables_without_a_local_rank_use_the_rank() -> None:
    env = applied(PMI_RANK="2", PMI_SIZE="3")
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("2", "2", "3")


def test_our_variables_win_over_a_launchers() -> None:
    env = applied(
        DIST_NOTEBOOK_RANK="0", SLURM_PROCID="7", DIST_NOTEBOOK_WORLD_SIZE="2", SLURM_NTASKS="9"
    )
    assert (env["RANK"], env["WORLD_SIZE"]) == ("0", "2")


def test_empty_values_are_skipped() -> None:
    env = applied(DIST_NOTEBOOK_RANK="", SLURM_PROCID="4")
    assert env["RANK"] == "4"


def test_each_engine_sees_the_gpu_at_its_local_rank() -> None:
    for local, gpu in (("0", "2"), ("1", "3")):
        env = applied(
            DIST_NOTEBOOK_RANK=local, DIST_NOTEBOOK_LOCAL_RANK=local, DIST_NOTEBOOK_DEVICES="2,3"
        )
        assert env["CUDA_VISIBLE_DEVICES"] == gpu


def test_devices_wrap_around_on_more_local_ranks_than_listed() -> None:
    env = applied(
        OMPI_COMM_WORLD_RANK="3", OMPI_COMM_WORLD_LOCAL_RANK="3", DIST_NOTEBOOK_DEVICES="0,1"
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "1"


def test_plain_engine_is_left_alone() -> None:
    env = applied(CUDA_VISIBLE_DEVICES="0", PATH="/bin")
    assert env == {"CUDA_VISIBLE_DEVICES": "0", "PATH": "/bin"}
