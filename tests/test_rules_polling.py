"""polling_thread: a thread retrying a queue call that does not wait spins, holding the GIL the
main thread needs after every torch op (diagnose/rules/polling.py)."""

import pytest
from conftest import SCRIPTS, read_report, torchneck
from rule_cases import analysis, facts, fires, silent

from torchneck.diagnose.rules.polling import PollingThread, polling_call, polling_lines

LOADER = """\
import queue
class Loader:
    def __init__(self, depth=2,
                 put_timeout=0.0):
        self.put_timeout = put_timeout
    def _put(self, q, item):
        while not self.stop.is_set():
            try:
                q.put(item, timeout=self.put_timeout)
                return True
            except queue.Full:
                continue
    def _spin(self, q):
        while True:
            try:
                return q.get_nowait()
            except queue.Empty:
                pass
    def _blocks(self, q, item):
        while True:
            q.put(item, timeout=0.1)
    def _once(self, q, item):
        q.put(item, timeout=0)
    async def _batch(self, q, deadline):
        while True:
            try:
                item = q.get_nowait()
            except QueueEmpty:
                item = await wait_for(q.get(), deadline)
"""


def _lines(src, waiting=0.5, ready=0.2):
    return [{"file": "/x/model.py", "line": 21, "function": "forward", "total_s": 1.0, "waiting_s": waiting,
             "ready_s": ready, "library": "Module._wrapped_call_impl (module.py)", "library_is_torch": True},
            {"file": str(src), "line": 9, "function": "Loader._put", "total_s": 0.2, "waiting_s": 0.15,
             "library": "Queue.put (queue.py)", "waits_on_thread": True},
            {"file": "/x/data.py", "line": 87, "function": "batches", "total_s": 0.3, "waiting_s": 0.3,
             "library": "Queue.get (queue.py)", "waits_on_thread": True}]


def _facts(lines, sampled_s=2.0):
    return facts(analysis=analysis(window_us=1e6), python={"window": {"sampled_s": sampled_s, "lines": lines}})


@fires("polling_thread")
def test_a_thread_retrying_a_zero_timeout_put_is_named_with_the_default_it_comes_from(tmp_path):
    """u_simclr_pkg: three augmentation threads retry `q.put(item, timeout=self.put_timeout)`
    with a default of 0.0 while the queues are full; the main thread's model call is off the CPU
    0.5 s of its 1 s (for the GIL, which alone decides) and ready to run 0.2 s (a core): 35 % of
    the 2 s steady state. Its waits on the queue (another thread's work) are not the main
    thread computing."""
    src = tmp_path / "data.py"
    src.write_text(LOADER)
    [f] = PollingThread().check(_facts(_lines(src)))
    assert [w.line for w in f.where] == [9, 4] and f.evidence["zero_at"] == 4
    assert f.time_lost_pct == pytest.approx(100 * 0.7 / 2.0) and "line 9 block" in f.fix
    path = str(src)
    assert polling_call(path, 9) == 4 and polling_call(path, 16) == 16  # get_nowait in a loop
    assert polling_call(path, 21) is None and polling_call(path, 23) is None  # waits; not retried in a loop
    assert polling_call(path, 27) is None  # an empty queue is then awaited with a deadline (an asyncio batcher)
    assert polling_lines(path) == [(9, 4), (16, 16)]


@silent("polling_thread")
def test_polling_thread_silent_without_contention_or_a_polling_loop(tmp_path):
    src = tmp_path / "data.py"
    src.write_text(LOADER)
    assert PollingThread().check(_facts(_lines(src, waiting=0.05, ready=0.05))) == []  # the main thread computes
    assert PollingThread().check(_facts(_lines(src, waiting=0.0, ready=0.9))) == []  # the machine's load
    blocking = tmp_path / "ok.py"
    blocking.write_text("import queue\ndef put(q, item):\n    while True:\n        q.put(item, timeout=0.1)\n")
    lines = [dict(ln, file=str(blocking), line=4) if ln["line"] == 9 else ln for ln in _lines(src)]
    assert PollingThread().check(_facts(lines)) == []  # contention, but from no polling loop (other load)


@fires("polling_thread")
def test_producer_threads_spinning_on_full_queues_slow_the_training_loop(run_dir):
    """A real run: two producer threads retry a zero-timeout put; the main thread's training
    steps wait for the GIL. The polling call leads, then the default giving it its zero."""
    script = SCRIPTS / "polling_producer.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    text = script.read_text().splitlines()
    put = next(i for i, s in enumerate(text, 1) if "q.put(" in s)
    default = next(i for i, s in enumerate(text, 1) if "put_timeout=0.0" in s)
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] == "polling_thread" and [w["line"] for w in top["where"]] == [put, default], top
    assert top["saving_pct"] > 10
