"""``siding demo`` as a newcomer runs it: the real CLI, no terminal, a short run."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

from siding.devkit.broker import EmbeddedKafka

_CLI = "from siding.cli.main import main; main()"


def _listening(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_demo_runs_summarises_and_leaves_nothing_behind(kafka: EmbeddedKafka) -> None:
    # (``kafka`` only makes this test fail or skip like the others when Kafka cannot start.)
    assert kafka.running
    # When the demo runs for 15 s without a terminal
    done = subprocess.run(
        [sys.executable, "-c", _CLI, "demo", "--duration", "15", "--rate", "200"],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    out = done.stdout
    # Then it exits 0 with a summary that shows deliveries and dead letters
    assert done.returncode == 0, out + done.stderr[-3000:]
    summary = out[out.index("summary") :]
    delivered = re.search(r"delivered \(ACK\)\s+([\d,]+)\s+dead-lettered ([\d,]+)", summary)
    assert delivered is not None, summary
    assert int(delivered.group(1).replace(",", "")) > 0
    assert int(delivered.group(2).replace(",", "")) > 0
    assert re.search(r"plain consumer\s+[\d.]+ msg/s", summary)
    # And it ends with what `siding dlq list` shows
    assert "$ siding dlq list --route" in out
    assert re.search(r"[1-9]\d* dead letter\(s\) of route", out)
    # And it printed progress lines (no terminal: plain lines, not a live view)
    assert re.search(r"\] running produced=\d+", out)
    # And the broker, the consumer service and the control API it started are gone
    broker = re.search(r"Kafka broker pid (\d+) on ([\d.]+):(\d+)", out)
    consumer = re.search(r"consumer service \S+ \S+ on ([\d.]+):(\d+)", out)
    control = re.search(r"control API on http://([\d.]+):(\d+)/", out)
    assert broker and consumer and control, out
    assert not _alive(int(broker.group(1)))
    for host, port in (broker.groups()[1:], consumer.groups(), control.groups()):
        assert not _listening(host, int(port))
