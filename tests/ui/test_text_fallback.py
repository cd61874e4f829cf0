"""The live view where no front end draws widgets (`jupyter console`, `nbconvert --execute`):
a real kernel driven by jupyter_client, which never makes the widget's model, on a real
2-rank CPU gloo cluster. The run's output is updated in place, by its display id, with the
progress as text at most once a second, and the end's picture replaces it.

(Here with the browser tests because it is the same live output seen by another front
end; it needs no chromium.)
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
TRAIN = """%%dist_train --name text --steps 160
import time
from dist_notebook import report
for i in range(160):
    report(step=i, loss=1.0 / (i + 1) + rank, samples=32)
    time.sleep(0.04)
"""


class Kernel:
    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        self.km.start_kernel(env=env, cwd=str(cwd))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str) -> list[tuple[float, dict[str, Any]]]:
        """Execute *code*; every iopub message of it, with the time it came."""
        messages: list[tuple[float, dict[str, Any]]] = []
        reply = self.kc.execute_interactive(
            code,
            timeout=180,
            output_hook=lambda msg: messages.append((time.monotonic(), msg)),
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        return messages

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    tmp = tmp_path_factory.mktemp("text-kernel")
    env = dict(os.environ)
    env.update(
        IPYTHONDIR=str(tmp / "ipython"),
        CUDA_VISIBLE_DEVICES="",
        DIST_NOTEBOOK_STORE=str(tmp / "runs.sqlite"),
    )
    k = Kernel(env, tmp)
    yield k
    k.close()


def test_without_a_widget_front_end_the_output_shows_the_progress_as_text(
    kernel: Kernel,
) -> None:
    kernel.run("%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu")
    messages = kernel.run(TRAIN)
    shown = [
        (t, m["content"])
        for t, m in messages
        if m["msg_type"] == "display_data" and WIDGET_MIME in m["content"]["data"]
    ]
    assert len(shown) == 1, "one live output"
    display_id = shown[0][1]["transient"]["display_id"]
    assert "load_run('text')" in shown[0][1]["data"]["text/plain"]
    updates = [
        (t, m["content"])
        for t, m in messages
        if m["msg_type"] == "update_display_data"
        and m["content"]["transient"]["display_id"] == display_id
    ]
    texts = [(t, c) for t, c in updates if "image/png" not in c["data"]]
    assert len(texts) >= 3, f"{len(texts)} text updates in a run of ~7 s"
    steps = []
    for _, content in texts:
        plain = content["data"]["text/plain"]
        header, values, *said = plain.split("\n")
        # the verdict's line, once the ranks have ten steps in common
        assert said == [] or (len(said) == 1 and said[0].startswith("verdict: ")), said
        found = re.search(r"step (\d+)/160", header)
        assert found, header
        steps.append(int(found.group(1)))
        assert "samples/s" in header and "ETA" in header, header
        assert re.fullmatch(r"loss: rank 0 \S+ · rank 1 \S+", values), values
        # the widget's view stays in the bundle, for a front end whose model was late
        assert content["data"][WIDGET_MIME] == shown[0][1]["data"][WIDGET_MIME]
    assert steps == sorted(steps) and steps[-1] > steps[0], steps
    gaps = [b[0] - a[0] for a, b in zip(texts, texts[1:], strict=False)]
    assert min(gaps) > 0.8, f"updates came {min(gaps):.2f} s apart"  # at most once a second
    final = updates[-1][1]["data"]
    assert "image/png" in final and WIDGET_MIME not in final
    assert "text: succeeded in" in final["text/plain"]
