"""Every benchmark of the harness, one entry each: what it measures, against which peer,
how it runs, what it writes and which page cites it.

``python -m bench list`` prints this table; ``python -m bench run NAME [ARGS...]`` runs one
entry (its module's ``__main__``, with ARGS); ``python -m bench run --all`` runs the entries
marked ``in_all`` one after the other, each in its own process with a time budget, and folds
their results into ``bench/results/README.md`` (``bench/run_all.py``).

A benchmark is kept while a figure of the docs (or of DESIGN) depends on it: ``docs`` names
the pages. A new benchmark is a module of this folder with a ``__main__`` block and one
entry here; ``tests/unit/test_bench_registry.py`` fails for a module of ``bench/`` that is
neither a benchmark nor one of the harness's own modules (``SUPPORT``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

INSTALL_PEERS = "pip install -e '.[bench]' (make bench does)"


@dataclass(frozen=True)
class Bench:
    name: str
    measures: str
    peer: str
    # The module of bench/ that runs it (``bench.<module>``), or a shell script of bench/.
    module: str = ""
    script: str = ""
    # Arguments of the run ``--all`` makes, and of ``--quick`` (a smoke run).
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    # In ``run --all`` (and so in bench/results/README.md), with its expected and most
    # seconds there (2-core machine under load).
    in_all: bool = False
    expected_s: int = 0
    budget_s: int = 0
    # What it needs beyond the venv: "" (nothing), or a phrase saying what.
    needs: str = ""
    # The peers' packages it imports (the ``bench`` extra installs them): checked first.
    peers: tuple[str, ...] = ()
    results: tuple[str, ...] = ()
    docs: tuple[str, ...] = field(default=())

    @property
    def target(self) -> str:
        return f"bench/{self.script}" if self.script else f"bench.{self.module or self.name}"


BENCHMARKS: tuple[Bench, ...] = (
    # The parts of `run --all`, in their order: those with targets first (cold start,
    # dispatch, report()'s overhead, first calls), then the peers, then the slow ones.
    Bench(
        "memory",
        "resident memory per rank after start",
        "a bare `import torch` process",
        in_all=True,
        expected_s=20,
        budget_s=90,
        peers=("nbdistributed",),
        results=("memory.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "cold_start",
        "from nothing to the first completed collective, 2 and 4 ranks",
        "torchrun, accelerate's notebook_launcher, nbdistributed, ipyparallel by hand",
        args=("--reps", "3"),
        quick=("--reps", "1"),
        in_all=True,
        expected_s=450,
        budget_s=600,
        peers=("accelerate", "nbdistributed"),
        results=("cold_start.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "dispatch",
        "what `%%dist` adds to an empty cell's round trip",
        "ipyparallel's raw `execute`",
        args=("--iterations", "100", "--warmup", "10"),
        quick=("--iterations", "20", "--warmup", "5"),
        in_all=True,
        expected_s=20,
        budget_s=90,
        results=("dispatch.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "train_overhead",
        "what `%%dist_train` + report() + the live view cost a DDP loop",
        "the same loop under torchrun",
        args=("--reps", "3", "--steps", "1500", "--modes", "abde"),
        quick=("--reps", "1", "--steps", "150", "--modes", "abcde"),
        in_all=True,
        expected_s=200,
        budget_s=400,
        results=("train_overhead.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "first_call",
        "the first `%%dist_train` and `%dist_pull` of a fresh kernel against later ones",
        "the same calls later in the kernel",
        args=("--reps", "2"),
        quick=("--reps", "1"),
        in_all=True,
        expected_s=90,
        budget_s=200,
        results=("first_call.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "round_trip",
        "an empty cell through each tool's cell magic, 2 and 4 ranks",
        "nbdistributed, ipyparallel's %%px",
        args=("--iterations", "40"),
        in_all=True,
        expected_s=50,
        budget_s=150,
        peers=("nbdistributed",),
        results=("round_trip.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "metrics_overhead",
        "report() over ZMQ on a training loop",
        "ipyparallel's publish_data, no reporting",
        args=("--reps", "3"),
        in_all=True,
        expected_s=50,
        budget_s=120,
        results=("metrics_overhead.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "metrics_latency",
        "one report()'s cost on a rank and how soon the kernel has it",
        "(absolute)",
        quick=("--records", "500"),
        in_all=True,
        expected_s=30,
        budget_s=90,
        results=("metrics_latency.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "throughput",
        "training throughput of one loop run five ways, 2 ranks",
        "torchrun, accelerate, nbdistributed, one process",
        args=("--reps", "3"),
        in_all=True,
        expected_s=250,
        budget_s=480,
        peers=("accelerate", "nbdistributed", "sklearn"),
        results=("throughput.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "state_transfer",
        "`%dist_push` / `%dist_pull` of a state dict to and from 4 ranks",
        "a gloo broadcast of data already on rank 0",
        args=("--reps", "2"),
        quick=("--mib", "256"),
        in_all=True,
        expected_s=120,
        budget_s=200,
        results=("state_transfer.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "cpu_share",
        "CPU time per process and thread while a loop trains, per mode",
        "the same loop under torchrun",
        args=("--reps", "2", "--steps", "1500"),
        quick=("--reps", "1", "--steps", "400"),
        in_all=True,
        expected_s=120,
        budget_s=240,
        results=("cpu_share.json",),
        docs=("docs/benchmarks.md",),
    ),
    # Run one by one: the figures the guides and the notes of docs/benchmarks.md quote.
    Bench(
        "start_profile",
        "where a cold start's time and CPU go, phase by phase",
        "(breakdown; cold_start is the comparison)",
        results=("start_profile.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "profile_report",
        "where report()'s cost goes: py-spy on the kernel and rank 0",
        "(breakdown)",
        args=("--mode", "a"),
        needs="py-spy",
        results=("profile_a_kernel.txt", "profile_a_rank0.txt"),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "live_view",
        "the live view in chromium while 2 CPU ranks report ~200 records/s",
        "JupyterLab without our labextension",
        args=("--steps", "2000", "--reps", "3"),
        quick=("--steps", "300", "--reps", "1"),
        needs="Debian's chromium and Playwright",
        results=("live_view.json", "live_view_hogs2.json"),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "faults",
        "what a failure costs: time to detect, time until usable, steps and processes left",
        "(absolute)",
        quick=("--cycles", "5"),
        results=("faults.json",),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "detach",
        "a kernel restart: attach to a detached cluster against starting it again",
        "a fresh `%dist_cluster start`",
        args=("--rounds", "6"),
        quick=("--rounds", "3"),
        results=("detach.json",),
        docs=("docs/guides/detach.md",),
    ),
    Bench(
        "straggler",
        "the straggler rule's verdict on healthy, slowed, skewed, starved, skipped runs",
        "(absolute)",
        quick=("--reps", "1", "--hogs", "0"),
        results=("straggler.json",),
        docs=("docs/guides/why-slow.md", "docs/getting-started.md"),
    ),
    Bench(
        "step_measures",
        "what report()'s step measures cost a training step",
        "the former measures",
        results=("step_measures.json", "step_measures_hogs2.json"),
        docs=("bench/README.md",),
    ),
    Bench(
        "export_overhead",
        "what `--tensorboard` / `--mlflow` cost a run, and an export after the fact",
        "the same run with no exporter",
        args=("--reps", "5", "--mlflow"),
        quick=("--reps", "1", "--steps", "100", "--records", "5000", "--mlflow-records", "0"),
        results=("export_overhead.json",),
        docs=("docs/guides/exporters.md",),
    ),
    Bench(
        "engine_compute",
        "whether a rank's engine slows the user's own computation",
        "plain processes",
        results=("engine_compute.json",),
        docs=("docs/guides/multinode.md",),
    ),
    Bench(
        "scale",
        "the control plane from 2 to 64 local CPU ranks",
        "torchrun, ipyparallel by hand",
        needs="~20 minutes on 2 cores at 64 ranks",
        results=("scale.json", "scale.md", "scale.png"),
        docs=("docs/benchmarks.md", "docs/guides/scale.md"),
    ),
    Bench(
        "start_timeline",
        "a cold many-rank start, phase by phase and engine by engine",
        "torchrun",
        args=("--ranks", "64"),
        quick=("--ranks", "8"),
        results=("start_timeline.json",),
        docs=("docs/guides/scale.md",),
    ),
    Bench(
        "scale_hosts",
        "32 ranks over four test hosts: the ssh launcher and Slurm, each start timed",
        "local ranks",
        args=("--launchers", "local,ssh,slurm", "--reps", "3"),
        quick=("--launchers", "ssh", "--reps", "1", "--hosts", "2", "--per-host", "2"),
        needs="root and the test hosts' packages (make testhosts)",
        results=("scale_hosts.json", "scale_hosts.md"),
        docs=("docs/benchmarks.md", "docs/guides/scale.md"),
    ),
    Bench(
        "multinode",
        "two test hosts: start to the first collective and a DDP loop",
        "torchrun --nnodes 2, a plain script over ssh",
        needs="root and the test hosts' packages (make testhosts)",
        results=("multinode.json", "multinode_scale.json"),
        docs=("docs/guides/multinode.md",),
    ),
    Bench(
        "multinode_steady",
        "steady DDP throughput on two test hosts, standing",
        "torchrun --nnodes 2, a plain script over ssh",
        needs="root and the test hosts' packages (make testhosts)",
        results=("multinode_steady.json", "multinode_steady_run1.json"),
        docs=("docs/guides/multinode.md",),
    ),
    Bench(
        "ray_start",
        "--launcher ray on a loopback Ray head: start to the first collective",
        "the same ranks with the local launcher, and Ray Train's TorchTrainer",
        needs="ray, and ray[train] for the trainer (pip install 'dist-notebook[ray,bench]')",
        results=("ray_start.json", "ray_start.md"),
        docs=("docs/guides/ray.md",),
    ),
    Bench(
        "ray_train",
        "%%dist_train throughput on Ray-placed ranks (loopback Ray head), 2 CPU ranks",
        "the same loop on local ranks, interleaved in one kernel",
        needs="ray (pip install 'dist-notebook[ray]')",
        results=("ray_train.json", "ray_train.md"),
        docs=("docs/guides/ray.md",),
    ),
    Bench(
        "gpu",
        "GPT-small bf16 on one NCCL rank: samples/s, MFU, NVML's cost, start",
        "the same loop under torchrun",
        script="gpu.sh",
        needs="a CUDA GPU",
        results=("gpu_h200.log", "gpu_h200_forkserver.log"),
        docs=("docs/benchmarks.md",),
    ),
    Bench(
        "gpu_notebooks",
        "every teaching notebook once, the learner's path, timed",
        "(absolute)",
        script="gpu_notebooks.sh",
        needs="a CUDA GPU (or --cpu)",
        results=("notebooks_h200.json", "notebooks_cpu.json"),
        docs=("docs/benchmarks.md",),
    ),
)

# The harness's own modules and the pieces a benchmark runs (not benchmarks themselves).
SUPPORT: dict[str, str] = {
    "__init__.py": "the package",
    "__main__.py": "`python -m bench`: list, run",
    "registry.py": "this table",
    "common.py": "shared set-up: statistics, machine, peers' commands, results",
    "run_all.py": "`run --all`: the in_all parts, then bench/results/README.md",
    "gpu_check.py": "the GPU check `gpu` runs after the GPU tests",
    "gpt_loop.py": "the GPT-small loop gpu_check runs under both sides",
    "gpu_env.sh": "the GPU machine's environment, sourced by gpu.sh and gpu_notebooks.sh",
    "notebooks_gpu.py": "the notebooks' runner `gpu_notebooks` runs",
}


def by_name(name: str) -> Bench | None:
    for b in BENCHMARKS:
        if b.name == name:
            return b
    return None


def files() -> set[str]:
    """The files of bench/ the registry accounts for (benchmarks' modules and support)."""
    own = {b.script or f"{b.module or b.name}.py" for b in BENCHMARKS}
    return own | set(SUPPORT)


def missing(modules: tuple[str, ...]) -> list[str]:
    """Those of *modules* this interpreter cannot import."""
    return [m for m in modules if importlib.util.find_spec(m) is None]
