"""The cell's live view in a real browser while 2 CPU ranks train at ~200 records/s.

Starts JupyterLab on loopback, opens a notebook in Debian's chromium (Playwright), and
runs ``%%dist_train`` cells whose ranks report every step. The page logs every draw of
the live view (``window.__dnLiveLog``: the time of the draw and, for each record drawn
for the first time, draw time minus the record's ``report()`` time); a MutationObserver
keeps every live-view element it sees. The kernel reports what the live view cost it
(CPU seconds of the feed thread, the collector's hand-off and the blocking cell's
message polling: ``Dashboard.cost()``) and its own process CPU over the run, with the
dashboard and with ``--no-dashboard``, runs interleaved.

    .venv/bin/python -m bench run live_view [--steps 2000] [--reps 3] [--hogs 2]

Writes bench/results/live_view.json. Figures: chart changes a second, p50/p95 from
report() to drawn, the live view's kernel cost as a share of one core, whether the output
element was ever replaced. Each figure is measured side by side: with this package's
labextension enabled and with it disabled (``jupyter labextension disable``'s page config
in the server's own config dir: what VS Code, Colab or a hub without it amount to; the
chart is the anywidget the kernel ships either way). ``--modes`` picks them; each rep
starts a fresh server per mode, the modes interleaved (A B A B ...), and the summary gives
each figure's spread over the reps.

report() to drawn, split: the page also logs each records message as it arrived
(``window.__dnLiveRecv``), so each record's latency is kernel (report() to the kernel's
send, ``clock``), transit (send to the browser's receipt: kernel, server, websocket) and
browser (receipt to the draw). The view's own figure (``latency_ms``) counts the transit
out (it takes the kernel's clock through the last message); on this one machine the
browser and kernel clocks are the same, so ``true_latency_ms`` is draw minus report().
The kernel part is split further, by tenths of the run: report() to the rank's send (each
rank's sender stamps its batches, ``rank_send_p95_by_tenth_ms``), to the collector's read
of the socket (``received_p95_by_tenth_ms``) and to the live feed (``arrival_...``); a
sampler in the kernel gives each kernel thread's CPU and its own worst wake-up lateness
by tenths (``kernel_threads_by_tenth``: the GIL or the CPU held elsewhere), and the times
of the page's hellos (one per model).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import secrets
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import PY, RESULTS, cpu_hogs, free_port, percentile, quick, write_result

CHROMIUM = "/usr/bin/chromium"
TRAIN = """%%dist_train --name {name} --steps {steps} {flags}
import time
from dist_notebook import report
for i in range({steps}):
    time.sleep(0.009)
    report(step=i, loss=1.0 / (i + 1), acc=i / {steps}, samples=64)
"""
# Before each run: the live feed's hand-over stamps each record's arrival in the kernel
# (arrival minus report(): the rank-to-kernel part of the kernel part). Bench only.
PROBE = """import time
from dist_notebook.display import live as _live
if not hasattr(_live, "_bench_arrivals"):
    _live._bench_arrivals = []
    _orig = _live.LiveFeed._on_records
    def _probe(self, records, _orig=_orig):
        now = time.time()
        _live._bench_arrivals.extend(now - r.time for r in records)
        _orig(self, records)
    _live.LiveFeed._on_records = _probe
_live._bench_arrivals.clear()
# and the collector's receipt of each message (report() to the kernel's socket read), and
# each hello a model of the page sent (the view's history), on the kernel's clock
from dist_notebook.training import collector as _coll
if not hasattr(_coll, "_bench_received"):
    _coll._bench_received = []
    _live._bench_hellos = []
    _ov = _coll.Collector._verify
    def _verify(self, frames, ends, _ov=_ov):
        now = time.time()
        records = _ov(self, frames, ends)
        _coll._bench_received.extend(now - r.time for r in records)
        return records
    _coll.Collector._verify = _verify
    _oh = _live.LiveFeed.history
    def _history(self, _oh=_oh):
        _live._bench_hellos.append(time.time())
        _oh(self)
    _live.LiveFeed.history = _history
_coll._bench_received.clear()
_live._bench_hellos.clear()
# and, each tenth of a second, every kernel thread's CPU and how late this sampler woke
# (the GIL or the CPU held elsewhere): what the kernel does while records wait
import threading
def _sample(stop, out, every=0.1):
    last = time.time()
    while not stop.wait(every):
        now = time.time()
        cpu = {}
        for t in threading.enumerate():
            try:
                clock = time.pthread_getcpuclockid(t.ident)
                cpu[t.name] = cpu.get(t.name, 0.0) + time.clock_gettime(clock)
            except (OSError, TypeError):
                continue  # a thread that ended meanwhile
        out.append((now, round(now - last - every, 4), cpu))
        last = now
_bench_samples = []
_bench_stop = threading.Event()
threading.Thread(target=_sample, args=(_bench_stop, _bench_samples), daemon=True).start()
_cpu0 = time.process_time()
"""
# On each rank, before a run: each batch the sender ships, with its records' report()
# times (the rank's part: report() to the send), kept for the run's dump below.
RANK_PROBE = """%%dist
import time
from dist_notebook.engine import reporter as _rep
if not hasattr(_rep, "_bench_ships"):
    _rep._bench_ships = []
    _os = _rep._Channel._ship
    def _ship(self, *args, _os=_os, **kwargs):
        times = [r.time for r in list(self._queue)]
        now = time.time()
        shipped = _os(self, *args, **kwargs)
        if times:
            _rep._bench_ships.append((now, times))
        return shipped
    _rep._Channel._ship = _ship
_rep._bench_ships.clear()
"""
RANK_DUMP = """%%dist
import json, os
with open(os.path.join({root!r}, f"ships-{name}-{{os.environ.get('RANK', '0')}}.json"), "w") as f:
    json.dump(_rep._bench_ships, f)
"""
COST = """import json, time
_m = get_ipython().magics_manager.registry["TrainMagics"]
_r, _d = _m.last_result, _m.last_dashboard
print("BENCH_RESULT " + json.dumps({
    "name": _r.name, "wall": _r.ended - _r.started, "records": _r.records,
    "live_cpu": None if _d is None else _d.cost(),
    "messages": None if _d is None else _d.feed.messages,
    "process_cpu": time.process_time() - _cpu0,
    "arrivals": [round(a, 4) for a in _live._bench_arrivals],
    "received": [round(a, 4) for a in _coll._bench_received],
    "hellos": [round(h - _r.started, 3) for h in _live._bench_hellos],
    "threads": _bench_threads(_bench_samples, _r.started, _r.ended),
    "warm_waited": None if _d is None else getattr(_d, "warm_waited", None),
}))
_bench_stop.set()
"""
# The sampler's figures by tenths of the run: each thread's CPU (s) and the sampler's
# worst lateness (s).
THREADS = """def _bench_threads(samples, started, ended):
    tenth = (ended - started) / 10
    out = []
    for i in range(10):
        lo, hi = started + i * tenth, started + (i + 1) * tenth
        inside = [s for s in samples if lo <= s[0] < hi]
        if len(inside) < 2:
            out.append(None)
            continue
        first, last = inside[0][2], inside[-1][2]
        cpu = {n: round(last[n] - first.get(n, 0.0), 3) for n in last}
        busy = {n: c for n, c in sorted(cpu.items(), key=lambda x: -x[1]) if c >= 0.005}
        out.append({"late_max": max(s[1] for s in inside), "cpu": busy})
    return out
"""
WATCH = """
window.__dnLiveLog = [];
window.__dnLiveRecv = [];
window.__dnLiveElements = [];
new MutationObserver(() => {
  for (const el of document.querySelectorAll('.dn-live')) {
    if (!window.__dnLiveElements.includes(el)) window.__dnLiveElements.push(el);
  }
}).observe(document, {subtree: true, childList: true});
"""


MODES = {"labextension": (), "no-labextension": ("dist-notebook",)}


def start_lab(root: Path, disabled: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    token = secrets.token_hex(16)
    config = root / ".cfg"
    if disabled:
        (config / "labconfig").mkdir(parents=True, exist_ok=True)
        (config / "labconfig" / "page_config.json").write_text(
            json.dumps({"disabledExtensions": dict.fromkeys(disabled, True)})
        )
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config), PYTHONUNBUFFERED="1")
    env.setdefault("DIST_NOTEBOOK_STORE", str(root / "runs.sqlite"))
    port = free_port()
    log = open(root / "lab.log", "wb")  # noqa: SIM115 (kept open for the server's life)
    process = subprocess.Popen(
        [PY, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.news_url="],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}api/status?token={token}", timeout=2):
                return process, f"{url}lab/tree/bench.ipynb?token={token}"
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit(f"jupyter lab did not start; see {root / 'lab.log'}")


def notebook(root: Path, steps: int, reps: int) -> list[str]:
    import nbformat

    cells = ["%load_ext dist_notebook", "%dist_cluster start -n 2 --cpu"]
    names = []
    for rep in range(reps):
        for live in (True, False):
            name = f"{'live' if live else 'off'}{rep}"
            flags = "" if live else "--no-dashboard"
            cells.append(PROBE)
            cells.append(RANK_PROBE)
            cells.append(TRAIN.format(name=name, steps=steps, flags=flags))
            cells.append(RANK_DUMP.format(root=str(root), name=name))
            cells.append(THREADS + COST)
            names.append(name)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, root / "bench.ipynb")
    return names


def measure(url: str, names: list[str], timeout: float, shot: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.add_init_script(WATCH)
        page.goto(url)
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=120_000)
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel"
            "?.status === 'idle'",
            timeout=120_000,
        )
        run_all = "() => { void window.jupyterapp.commands.execute('notebook:run-all-cells'); }"
        page.evaluate(run_all)
        # every measuring cell printed its line, or a cell failed (run-all stops there)
        try:
            outputs = _wait_for_results(page, len(names), timeout)
        finally:
            page.screenshot(path=str(shot))
        seen = page.evaluate(
            """() => ({
              log: window.__dnLiveLog,
              recv: window.__dnLiveRecv,
              elements: window.__dnLiveElements.map(
                el => el.querySelector('.dn-live-title')?.textContent)
            })"""
        )
        browser.close()
    return {"seen": seen, "kernel": _results(outputs)}


# The notebook model's outputs (not the DOM: JupyterLab renders only visible cells).
OUTPUTS = """() => {
  const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
  const out = [];
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type === 'code') out.push(...cell.outputs.toJSON());
  }
  return out;
}"""


def _results(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    lines = [
        line
        for o in outputs
        if o.get("output_type") == "stream"
        for line in "".join(o.get("text", "")).splitlines()
    ]
    found = [json.loads(x.split("BENCH_RESULT ", 1)[1]) for x in lines if "BENCH_RESULT " in x]
    return list({r["name"]: r for r in found}.values())  # one per run


def _wait_for_results(page: Any, n: int, timeout: float) -> list[dict[str, Any]]:
    """Every measuring cell printed its line; a failed cell (run-all stops) fails here."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        outputs = page.evaluate(OUTPUTS)
        errors = [o for o in outputs if o.get("output_type") == "error"]
        if errors:
            raise SystemExit(f"a cell failed: {errors[0].get('ename')}: {errors[0].get('evalue')}")
        if len(_results(outputs)) >= n:
            return outputs
        time.sleep(1)
    kinds = [(o.get("output_type"), str(o.get("text", o.get("data", "")))[:80]) for o in outputs]
    raise SystemExit(f"no result after {timeout:.0f} s; outputs: {kinds}")


def split_latency(recv: list[dict[str, Any]], draws: list[dict[str, Any]]) -> dict[str, Any]:
    """report() to drawn in parts, per record: kernel (report() to the kernel's send),
    transit (send to the browser's receipt), browser (receipt to the draw of the records,
    from the last message before the draw); seconds on this machine's one clock."""
    kernel: list[float] = []
    transit: list[float] = []
    browser: list[float] = []
    arrivals = sorted(m["at"] for m in recv)
    for m in recv:
        kernel += [m["clock"] - t for t in m["times"]]
        transit += [m["at"] - m["clock"]] * len(m["times"])
    for d in draws:
        i = bisect.bisect_right(arrivals, d["at"]) - 1
        if i >= 0:
            browser += [d["at"] - arrivals[i]] * len(d["latencies"])
    return {
        name: {"p50": 1000 * percentile(v, 50), "p95": 1000 * percentile(v, 95), "n": len(v)}
        for name, v in (("kernel", kernel), ("transit", transit), ("browser", browser))
    }


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    draws = [d for d in raw["seen"]["log"] if d["latencies"]]
    latencies = [x for d in draws for x in d["latencies"]]
    # a history sent again to a view made late (reset) holds old records: not live ones
    recv = [m for m in raw["seen"]["recv"] if m["times"] and not m.get("reset")]
    # one clock: a record's report() to its draw, the transit included
    true_latencies = [d["at"] - t for d in draws for t in d.get("times", [])]
    # draws per second within each live run: split the log where it pauses > 2 s
    runs: list[list[float]] = [[]]
    for d in draws:
        if runs[-1] and d["at"] - runs[-1][-1] > 2:
            runs.append([])
        runs[-1].append(d["at"])
    rates = [(len(r) - 1) / (r[-1] - r[0]) for r in runs if len(r) > 1 and r[-1] > r[0]]
    live = [k for k in raw["kernel"] if k["live_cpu"] is not None]
    off = [k for k in raw["kernel"] if k["live_cpu"] is None]
    titles = raw["seen"]["elements"]
    return {
        "draws_per_s": rates,
        "latency_ms": _pcts(latencies) | {"max": 1000 * max(latencies) if latencies else None},
        "true_latency_ms": _pcts(true_latencies),
        "latency_parts_ms": split_latency(recv, draws),
        "history_records": sum(len(m["times"]) for m in raw["seen"]["recv"] if m.get("reset")),
        # the kernel part over the run, by tenths: where in the run the slow records are
        "kernel_part_p95_by_tenth_ms": _by_tenth(recv),
        # report() to the kernel's hand-over (the collector), by tenths of the run
        "arrival_ms": [_pcts(k["arrivals"]) for k in live],
        "arrival_p95_by_tenth_ms": [_tenths(k["arrivals"]) for k in live],
        # the same split further: report() to the rank's send, to the collector's read
        "rank_send_p95_by_tenth_ms": [_tenths(k["ships"]) for k in live if k.get("ships")],
        "received_p95_by_tenth_ms": [_tenths(k["received"]) for k in live],
        # when the page's models said hello (s after the run's start): one per model
        "hellos_s": [k["hellos"] for k in live],
        # each kernel thread's CPU and the worst wake-up lateness, by tenths of the run
        "kernel_threads_by_tenth": [k["threads"] for k in live],
        "records_per_s": [k["records"] / k["wall"] for k in raw["kernel"]],
        "live_view_core_share": [k["live_cpu"] / k["wall"] for k in live],
        "kernel_core_share_live": [k["process_cpu"] / k["wall"] for k in live],
        "kernel_core_share_off": [k["process_cpu"] / k["wall"] for k in off],
        "messages_per_s": [k["messages"] / k["wall"] for k in live],
        "elements_per_run": {t: titles.count(t) for t in sorted(set(titles))},
    }


def _ships(root: Path, name: str) -> list[float]:
    """Each record's wait on its rank, report() to the sender's send, in report() order."""
    waits: list[tuple[float, float]] = []
    for path in root.glob(f"ships-{name}-*.json"):
        for sent, times in json.loads(path.read_text()):
            waits += [(t, sent - t) for t in times]
    return [w for _, w in sorted(waits)]


def _by_tenth(recv: list[dict[str, Any]]) -> list[float]:
    return _tenths([a for _, a in sorted((t, m["clock"] - t) for m in recv for t in m["times"])])


def _tenths(values: list[float]) -> list[float]:
    """p95 (ms) of each tenth of *values*, in their order."""
    tenth = max(1, len(values) // 10)
    return [1000 * percentile(values[i : i + tenth], 95) for i in range(0, len(values), tenth)]


def _pcts(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": 1000 * percentile(values, 50),
        "p95": 1000 * percentile(values, 95),
    }


def spread(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure over the reps: [min, median, max]."""

    def three(values: list[float]) -> list[float]:
        return [min(values), statistics.median(values), max(values)] if values else []

    def each(pick: Any) -> list[float]:
        out: list[float] = []
        for r in reps:
            value = pick(r)
            out += value if isinstance(value, list) else [value]
        return three([v for v in out if v is not None])

    return {
        "reps": len(reps),
        "draws_per_s": each(lambda r: r["draws_per_s"]),
        "latency_p50_ms": each(lambda r: r["latency_ms"]["p50"]),
        "latency_p95_ms": each(lambda r: r["latency_ms"]["p95"]),
        "true_latency_p95_ms": each(lambda r: r["true_latency_ms"]["p95"]),
        "kernel_part_p95_ms": each(lambda r: r["latency_parts_ms"]["kernel"]["p95"]),
        "transit_part_p95_ms": each(lambda r: r["latency_parts_ms"]["transit"]["p95"]),
        "browser_part_p95_ms": each(lambda r: r["latency_parts_ms"]["browser"]["p95"]),
        "live_view_core_share": each(lambda r: r["live_view_core_share"]),
        "kernel_core_share_live": each(lambda r: r["kernel_core_share_live"]),
        "kernel_core_share_off": each(lambda r: r["kernel_core_share_off"]),
        "elements_per_run_max": max(max(r["elements_per_run"].values(), default=0) for r in reps),
    }


def run_mode(mode: str, steps: int, reps: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"dist-bench-live-{mode}-"))
    names = notebook(root, steps, reps)
    process, url = start_lab(root, MODES[mode])
    try:
        raw = measure(url, names, 120 + 2 * len(names) * steps * 0.02, root / "last.png")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    ran = [k["name"] for k in raw["kernel"]]
    if ran != names:  # each measuring cell reports the run of the cell before it
        raise SystemExit(f"{mode}: cells ran out of order: {ran} != {names}")
    for k in raw["kernel"]:
        k["ships"] = _ships(root, k["name"])
    figures = summarize(raw)
    for k in raw["kernel"]:
        for name in ("arrivals", "received", "ships"):
            k.pop(name, None)  # summarized above
    return {"figures": figures, "raw_kernel": raw["kernel"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300 if quick() else 2000)
    parser.add_argument("--reps", type=int, default=1 if quick() else 3)
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated, of {', '.join(MODES)} (default: both)",
    )
    parser.add_argument(
        "--hogs",
        type=int,
        default=0,
        help="busy processes (a `while True: pass` each) running beside the whole measure;"
        " results go to live_view_hogs<N>.json",
    )
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise SystemExit(f"--modes: unknown {unknown}; choose from {', '.join(MODES)}")
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"needs chromium at {CHROMIUM} (apt-get install chromium)")
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with cpu_hogs(args.hogs):
        for rep in range(args.reps):  # the modes interleaved: drift in load falls on both
            for mode in modes:
                runs[mode].append(run_mode(mode, args.steps, 1))
                print(f"rep {rep} {mode}: {json.dumps(runs[mode][-1]['figures'])}", flush=True)
    summary = {m: spread([r["figures"] for r in rs]) for m, rs in runs.items()}
    print(json.dumps(summary, indent=2))
    name = f"live_view_hogs{args.hogs}" if args.hogs else "live_view"
    payload = {"steps": args.steps, "reps": args.reps, "hogs": args.hogs, "summary": summary}
    write_result(name, {**payload, "modes": runs})
    print(f"results in {RESULTS / (name + '.json')}")


if __name__ == "__main__":
    main()
