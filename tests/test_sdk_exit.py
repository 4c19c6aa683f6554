"""Leaving the agent: a bounded exit with the collector down, and forked children that keep their spans.

Each agent is a real subprocess exporting through the real OTLP/HTTP exporter; the timeouts of the
subprocess calls only guard against a hang.
"""

from __future__ import annotations

import json
import re
import socket
import time

import pytest

from tests.otlp_sink import OtlpGrpcSink, OtlpSink
from tests.test_sdk_export import STATS_AGENT, run_agent

HANG_GUARD = 60  # seconds; a healthy run takes a few


def closed_loopback_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _lost_line(stderr: str) -> int:
    (count,) = re.findall(r"tailcut: (\d+) span\(s\) were lost in this process", stderr)
    return int(count)


def test_exit_with_the_collector_down_is_bounded_and_reports_the_lost_spans():
    started = time.monotonic()
    done = run_agent(
        STATS_AGENT.format(init=f"endpoint='http://127.0.0.1:{closed_loopback_port()}'"),
        "--leave-to-atexit",
        timeout=HANG_GUARD,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "agent finished" in done.stdout
    assert elapsed < 15  # a hang guard, not a benchmark: the default shutdown_timeout is 3 s
    assert _lost_line(done.stderr) == 4  # three tools and the run
    assert done.stderr.count("were lost in this process") == 1


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_the_shutdown_timeout_is_configurable_and_the_loss_is_in_stats(how):
    endpoint = f"http://127.0.0.1:{closed_loopback_port()}"
    extra = ", shutdown_timeout=0.5" if how == "argument" else ""
    env = {"TAILCUT_SHUTDOWN_TIMEOUT": "0.5"} if how == "environment" else {}
    done = run_agent(STATS_AGENT.format(init=f"endpoint={endpoint!r}{extra}"), env=env, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout.splitlines()[0])
    assert stats["spans_exported"] == 0
    assert stats["spans_dropped"] == 4
    assert _lost_line(done.stderr) == 4


def test_a_bad_shutdown_timeout_variable_warns_and_falls_back():
    with OtlpSink() as sink:
        done = run_agent(
            STATS_AGENT.format(init=f"endpoint={sink.endpoint!r}"),
            env={"TAILCUT_SHUTDOWN_TIMEOUT": "soon"},
            timeout=HANG_GUARD,
        )
    assert done.returncode == 0, done.stderr
    assert "ignoring TAILCUT_SHUTDOWN_TIMEOUT='soon'" in done.stderr
    assert json.loads(done.stdout.splitlines()[0])["spans_exported"] == 4


FORKING_AGENT = """
    import os, sys, time, multiprocessing
    import tailcut
    tailcut.init(service_name="forker", endpoint="{endpoint}", protocol="{protocol}", shutdown_timeout=20)

    @tailcut.tool
    def work(who):
        return who

    def child_run():
        with tailcut.run("child"):
            work("child")

    with tailcut.run("parent-before"):
        work("parent")
    how, when = sys.argv[1:]
    if when == "during-export":  # the collector holds its first answer: fork while it is awaited
        time.sleep(1.5)
    else:  # the parent's exporter now holds a live connection to the collector
        tailcut.force_flush()

    if how == "multiprocessing":
        process = multiprocessing.get_context("fork").Process(target=child_run)
        process.start()
        process.join({guard})
        print("child exit code", process.exitcode)
    else:
        pid = os.fork()
        if pid == 0:
            child_run()
            if how == "shutdown-then-os-exit":
                tailcut.shutdown()
                os._exit(0)
            sys.exit(0)  # exits through atexit, which flushes
        _, status = os.waitpid(pid, 0)
        print("child exit code", os.waitstatus_to_exitcode(status))
    with tailcut.run("parent-after"):
        work("parent")
    tailcut.shutdown()
    print("parent stats", tailcut.stats()["spans_exported"], tailcut.stats()["spans_dropped"])
"""


@pytest.mark.parametrize("when", ["after-an-export", "during-export"])
@pytest.mark.parametrize("how", ["shutdown-then-os-exit", "sys-exit", "multiprocessing"])
def test_a_child_forked_after_init_exports_its_spans_and_exits(how, when):
    with OtlpSink(delay_first=3.0 if when == "during-export" else 0.0) as sink:
        agent = FORKING_AGENT.format(endpoint=sink.endpoint, protocol="http/protobuf", guard=HANG_GUARD)
        done = run_agent(agent, how, when, timeout=HANG_GUARD)
        assert done.returncode == 0, done.stderr
        assert "child exit code 0" in done.stdout, done.stdout + done.stderr
        # Each process counts its own spans: the parent's four, none of the child's.
        assert "parent stats 4 0" in done.stdout
        roots = sorted(span.name for _, span in sink.spans if not span.parent_span_id)
    assert roots == ["child", "parent-after", "parent-before"]
    assert len(sink.spans) == 6
    assert {resource["service.name"] for resource, _ in sink.spans} == {"forker"}
    # The child never writes on the connection its parent opened (and may still be using).
    parent_ports = {port for port, names in sink.connections if "parent-before" in names}
    child_ports = {port for port, names in sink.connections if "child" in names}
    assert child_ports and not child_ports & parent_ports


@pytest.mark.parametrize("how", ["sys-exit", "multiprocessing"])
def test_a_child_forked_after_init_exports_its_spans_over_grpc(how):
    """gRPC channels do not survive a fork: the child exports through a channel of its own."""
    with OtlpGrpcSink() as sink:
        agent = FORKING_AGENT.format(endpoint=sink.endpoint, protocol="grpc", guard=HANG_GUARD)
        done = run_agent(agent, how, "after-an-export", timeout=HANG_GUARD)
        assert done.returncode == 0, done.stderr
        assert "child exit code 0" in done.stdout, done.stdout + done.stderr
        assert "parent stats 4 0" in done.stdout
    assert sorted(span.name for span in sink.spans if not span.parent_span_id) == [
        "child",
        "parent-after",
        "parent-before",
    ]
