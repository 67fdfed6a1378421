"""memlint.integrate.isolation: limits, exit reasons, the message channel."""

from __future__ import annotations

import os
import signal

import pytest

from memlint.integrate import isolation


def test_exit_reasons_name_the_signal_or_status():
    assert isolation.exit_reason(-signal.SIGSEGV).startswith("crashed (SIGSEGV: ")
    assert isolation.exit_reason(-signal.SIGABRT).startswith("crashed (SIGABRT: ")
    assert "out-of-memory" in isolation.exit_reason(-signal.SIGKILL)
    assert isolation.exit_reason(0) == "exited with status 0 without a result (os._exit or a crash in the target?)"
    assert isolation.exit_reason(7).startswith("exited with status 7 ")


def test_messages_are_json_lines_of_bounded_size():
    reader = isolation._LineReader()
    assert reader.feed(b'{"progress": "a"}\n{"res') == [{"progress": "a"}]
    assert reader.feed(b'ult": 1}\n') == [{"result": 1}]
    with pytest.raises(isolation.ChildFailed, match="not JSON"):
        isolation._LineReader().feed(b"print output\n")
    with pytest.raises(isolation.ChildFailed, match="not a JSON object"):
        isolation._LineReader().feed(b"[1]\n")
    with pytest.raises(isolation.ChildFailed, match="more than 16 MiB"):
        isolation._LineReader().feed(b" " * (isolation.MAX_MESSAGE_BYTES + 1))


def test_group_rss_counts_this_process_group():
    assert isolation.group_rss_bytes(os.getpgrp()) > 10 * 2**20
    assert isolation.group_rss_bytes(2**22 + 12345) == 0  # no such group


def test_default_memory_limit_is_half_the_host():
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert isolation.default_memory_limit() == total // 2


def test_worker_reports_its_own_exceptions_in_one_line():
    from memlint.errors import TargetError
    from memlint.integrate.worker import describe_exception, with_memory_hint

    assert describe_exception(SystemExit(3), 2**30) == "the target called sys.exit(3)"
    assert describe_exception(MemoryError(), 2**30) == "ran out of memory (limit 1.0 GiB, --estimate-memory)"
    assert describe_exception(ValueError("bad\nsecond line"), 0) == "raised ValueError: bad"
    assert describe_exception(TargetError("target 'x': nope"), 0) == "target 'x': nope"
    assert with_memory_hint("factory raised MemoryError", 2**31).endswith("(memory limit 2.0 GiB, --estimate-memory)")
    assert with_memory_hint("factory raised ValueError", 2**31) == "factory raised ValueError"


def test_a_worker_that_cannot_start_is_one_line(monkeypatch):
    monkeypatch.setattr(isolation.sys, "executable", "/nonexistent/python")
    with pytest.raises(isolation.ChildFailed, match=r"could not start the estimate process \(No such file"):
        isolation.run_worker({"path": "t.py"}, isolation.Limits(timeout=5, memory=2**30))
