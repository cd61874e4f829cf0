"""GPU ranks with nccl: one device per engine, collectives on the GPU.

Skipped on hosts without enough CUDA GPUs (counted with nvidia-smi, so the test process
never initialises CUDA itself).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.cluster.onranks.execute import run_on_ranks
from dist_notebook.cluster.onranks.transfer import pull

pytestmark = pytest.mark.timeout(180)


def gpu_cluster(n: int) -> Iterator[DistCluster]:
    cluster = DistCluster(ClusterSpec(n=n, gpus=tuple(range(n))))
    cluster.start_sync()
    try:
        yield cluster
    finally:
        cluster.stop_sync()


def check_cluster(cluster: DistCluster, n: int) -> None:
    assert cluster.backend == "nccl"
    assert [(r.rank, r.device, r.backend) for r in cluster.ranks] == [
        (r, "cuda:0", "nccl") for r in range(n)
    ]
    seen = pull(
        cluster,
        "(str(device), torch.cuda.device_count(), dist.get_backend(),"
        " __import__('os').environ['CUDA_VISIBLE_DEVICES'])",
        list(range(n)),
    )
    # Each engine sees exactly one GPU: its own, as cuda:0.
    assert seen == {r: ("cuda:0", 1, "nccl", str(r)) for r in range(n)}
    outputs = run_on_ranks(
        cluster,
        "t = torch.full((1024,), float(rank + 1), device=device)\n"
        "dist.all_reduce(t)\n"
        "torch.cuda.synchronize()\n"
        "(t.device.type, t[0].item(), bool((t == t[0]).all()))",
    )
    total = float(n * (n + 1) // 2)
    assert [o.result["data"]["text/plain"] for o in outputs if o.result] == [
        repr(("cuda", total, True))
    ] * n


@pytest.mark.requires_gpus(1)
def test_one_gpu_rank_with_nccl() -> None:
    for cluster in gpu_cluster(1):
        check_cluster(cluster, 1)


@pytest.mark.requires_gpus(2)
def test_two_gpu_ranks_with_nccl() -> None:
    for cluster in gpu_cluster(2):
        check_cluster(cluster, 2)
        cluster.restart_sync()
        check_cluster(cluster, 2)


@pytest.mark.requires_gpus(1)
def test_a_gpu_rank_forked_from_the_fork_server() -> None:
    """The fork server imports torch without touching CUDA; its forked engine then
    initialises CUDA on its own device (``%load_ext`` starts the server in a notebook)."""
    from dist_notebook.cluster import forkserver

    server = forkserver.prestart()
    assert server is not None and server.wait_ready(), "the fork server did not start"
    try:
        for cluster in gpu_cluster(1):
            assert pull(cluster, "__import__('os').getppid()", [0]) == {0: server.pid}
            check_cluster(cluster, 1)
    finally:
        forkserver.close()
