"""GPU truth: a GPU rank's records carry NVML's utilisation, memory and power of its own
device (matched by UUID), sampled at 1-2 Hz; CPU ranks' records carry none."""

from __future__ import annotations

import pytest

from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.cluster.onranks.transfer import pull
from dist_notebook.training import RunSpec, TrainingRun

pytestmark = pytest.mark.timeout(240)

LOOP = """
import time
a = torch.randn(4096, 4096, device=device)
start = time.time()
step = 0
while time.time() - start < 4.0:
    for _ in range(20):
        b = a @ a
    torch.cuda.synchronize()
    report(step=step, samples=20, loss=b[0, 0])  # a GPU tensor: read by the sender
    step += 1
"""


@pytest.mark.requires_gpus(1)
def test_a_gpu_rank_reports_its_own_device_through_nvml() -> None:
    cluster = DistCluster(ClusterSpec(n=1, gpus=(0,)))
    cluster.start_sync()
    try:
        run = TrainingRun(cluster, RunSpec(code=LOOP, name="gpu-metrics"))
        result = run.run()
        assert result.state.value == "succeeded", result.error
        records = run.metrics.records(0)
        sampled = [r.gpu for r in records if r.gpu]
        span = records[-1].time - records[0].time
        # 2 Hz over ~4 s: a sample goes out once, with the first record after it.
        assert 1 <= len(sampled) / span <= 4, (len(sampled), span)
        assert len(sampled) < len(records)
        assert all(isinstance(r.metrics["loss"], float) for r in records)
        busiest = max(s["util"] for s in sampled)
        assert 50 <= busiest <= 100, sampled  # matrix products keep the device busy
        assert all(s["mem"] > 64 * 2**20 for s in sampled)  # 64 MiB of operands at least
        assert all(s.get("power", 1.0) > 0 for s in sampled)
        summary = run.metrics.summary(0)
        assert summary.gpu_util is not None and summary.gpu_mem is not None
        # The sampler's device is the rank's own: the same UUID on both sides.
        same = pull(
            cluster,
            "(lambda g, n: (n.nvmlInit(), g.normalise_uuid(n.nvmlDeviceGetUUID("
            "g.nvml_handle(n, g.cuda_uuid()))) == g.cuda_uuid())[1])"
            "(__import__('dist_notebook.engine.gpu', fromlist=['x']), __import__('pynvml'))",
            [0],
        )
        assert same == {0: True}
    finally:
        cluster.stop_sync()
