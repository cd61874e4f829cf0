"""%dist_cluster stacks as read: the main thread first, identical stacks once."""

from __future__ import annotations

from dist_notebook.magics.stacks_report import parse, rank_report, report

WATCHER = """Thread 0x00007f23f37fe6c0 (most recent call first):
  File "/venv/lib/python3.11/site-packages/ipykernel/iostream.py", line 478 in _watch_pipe_fd
  File "/usr/lib/python3.11/threading.py", line 982 in run
  File "/usr/lib/python3.11/threading.py", line 1045 in _bootstrap_inner
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap
"""


def dump(pid: int, line: int) -> str:
    """A rank's faulthandler dump: two identical watcher threads, then the main thread
    (faulthandler lists it last, as 'Current thread'), in a cell named after the pid."""
    main = (
        f"Current thread 0x00007f2425452b80 (most recent call first):\n"
        f'  File "/tmp/ipykernel_{pid}/3737901970.py", line {line} in <module>\n'
        '  File "/venv/site-packages/ipyparallel/engine/app.py", line 995 in start\n'
        f'  File "<frozen runpy>", line 198 in _run_module_as_main\n'
    )
    return WATCHER + "\n" + WATCHER.replace("7f23f37fe6c0", "7f23f3fff6c0") + "\n" + main


def test_the_main_thread_comes_first_and_identical_threads_once() -> None:
    text = rank_report(dump(5794, 4))
    blocks = text.split("\n\n")
    assert blocks[0].startswith("main thread (most recent call first):"), text
    assert 'File "<cell>", line 4 in <module>' in blocks[0], text
    assert blocks[1].startswith("2 threads, each (most recent call first):"), text
    assert len(blocks) == 2 and "0x" not in text, text


def test_ranks_with_the_same_stacks_print_once_with_their_set() -> None:
    stacks = {r: dump(1000 + r, 7) for r in range(64)}
    stacks[5] = dump(1005, 4)  # rank 5 is elsewhere: the straggler
    stacks[9] = "process 1009 is gone"
    text = report(stacks)
    headers = [line for line in text.splitlines() if line.startswith("--- ")]
    assert headers == ["--- ranks 0-4,6-8,10-63 ---", "--- rank 5 ---", "--- rank 9 ---"], headers
    assert "process 1009 is gone" in text


def test_a_rank_without_a_dump_is_said_in_words() -> None:
    assert parse("process 12 is stopped (SIGSTOP): it cannot run any code") is None
    assert rank_report("no answer to SIGUSR1 within the wait") == (
        "no answer to SIGUSR1 within the wait"
    )
