"""Signals held back while evidence is written (capture/signals.py, capture/gzipped.py)."""

import gzip
import signal

import pytest

from torchneck.capture.gzipped import gzip_file
from torchneck.capture.signals import held_back, interrupts_held_back


def test_a_ctrl_c_inside_the_block_arrives_once_the_block_is_done():
    before = signal.getsignal(signal.SIGINT)
    written = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held_back():
            signal.raise_signal(signal.SIGINT)
            written.append("trace")  # the block is not cut short
    assert written == ["trace"]
    assert signal.getsignal(signal.SIGINT) is before


def test_a_sigterm_goes_to_the_handler_from_before_and_blocks_nest():
    seen = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with held_back(signal.SIGTERM):
            with held_back(signal.SIGTERM):
                signal.raise_signal(signal.SIGTERM)
            assert seen == []  # the outer block still holds it
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, before)


def test_gzip_file_renames_the_whole_file_into_place(tmp_path):
    src, dst = tmp_path / "trace.json", tmp_path / "trace.json.gz"
    src.write_bytes(b'{"traceEvents": []}' * 1000)
    gzip_file(src, dst)
    assert gzip.decompress(dst.read_bytes()) == b'{"traceEvents": []}' * 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.gz"]


def test_a_second_ctrl_c_is_delivered_at_once_and_both_signals_are_delivered():
    """Asked twice, the user means it now (a stop or an export that hangs); a SIGINT and a
    SIGTERM held together are both delivered, even though the first handler raises."""
    seen = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        reached = []
        with pytest.raises(KeyboardInterrupt):
            with interrupts_held_back():
                signal.raise_signal(signal.SIGINT)
                reached.append(1)
                signal.raise_signal(signal.SIGINT)  # raises here, inside the block
                reached.append(2)
        assert reached == [1] and seen == []
        with pytest.raises(KeyboardInterrupt):
            with interrupts_held_back():
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGTERM)
                signal.raise_signal(signal.SIGTERM)  # a SIGTERM again is held still (a script's own)
                assert seen == []
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, before)
