"""The benchmark report: ``latest.json`` (plus a timestamped copy) and ``latest.md``."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
CURVE_PNG = "latency_curve.png"
Entry = Mapping[str, Any]
# A row for Parallel Consumer over the network; shown only for the modes it ran in.
_OVER_HTTP = "seconds, Parallel Consumer over HTTP"

# (field, label) per workload; "baselines.x" reads inside the entry's baselines.
_ROWS: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "partition_scalability": (
        ("msgs/s", "siding_msgs_per_s", "", "baselines.serial_consumer_msgs_per_s"),
        ("bound msgs/s", "bound_msgs_per_s", "", ""),
    ),
    "pc_table": (
        (
            "seconds",
            "siding_seconds",
            "baselines.parallel_consumer_seconds",
            "baselines.serial_consumer_seconds",
        ),
        (_OVER_HTTP, "", "baselines.parallel_consumer_vertx_seconds", ""),
    ),
    "hol": (
        ("fast p50 ms", "fast_p50_ms", "", "baselines.serial_consumer_fast_p50_ms"),
        ("fast p99 ms", "fast_p99_ms", "", "baselines.serial_consumer_fast_p99_ms"),
        ("fast p99 ms, no slow msgs", "fast_p99_ms_without_slow", "", ""),
    ),
    "poison_pills": (
        ("msgs/s", "siding_msgs_per_s", "", ""),
        ("msgs/s, no poison", "siding_msgs_per_s_without_poison", "", ""),
        ("DLQ exact / lost", "dlq_exact+lost", "", ""),
    ),
    "crash_pill": (
        ("deaths until the pill was convicted", "with_pill.deaths", "", ""),
        (
            "seconds, first death to conviction",
            "with_pill.seconds_first_death_to_conviction",
            "",
            "",
        ),
        ("duplicate deliveries (innocent)", "with_pill.duplicate_deliveries", "", ""),
        ("innocent messages in the DLQ", "with_pill.innocent_in_dlq", "", ""),
        ("p50 / p99 ms, during isolation", "with_pill.during_isolation_p50_ms+p99", "", ""),
        ("p50 / p99 ms, no pill", "without_pill.p50_ms+p99", "", ""),
    ),
    "key_retry": (
        (
            "never-failed p50 ms",
            "siding.with_failures.never_failed_p50_ms",
            "parallel_consumer.with_failures.never_failed_p50_ms",
            "",
        ),
        (
            "never-failed p99 ms",
            "siding.with_failures.never_failed_p99_ms",
            "parallel_consumer.with_failures.never_failed_p99_ms",
            "",
        ),
        (
            "never-failed p50 ms, no failures",
            "siding.without_failures.never_failed_p50_ms",
            "parallel_consumer.without_failures.never_failed_p50_ms",
            "",
        ),
        (
            "order violations",
            "siding.with_failures.order_violations",
            "parallel_consumer.with_failures.order_violations",
            "",
        ),
        ("targets met", "siding.targets.met", "parallel_consumer.targets.met", ""),
    ),
    "cost": (
        ("CPU s per 1,000 msgs", "cpu_s_per_1000", "", ""),
        ("transport floor", "floor_cpu_s_per_1000", "", ""),
    ),
}


def machine() -> str:
    """Cores, RAM, CPU model, OS, Python and Java versions, as one line."""
    cpu = "unknown CPU"
    info = Path("/proc/cpuinfo")
    if info.exists() and (m := re.search(r"model name\s*:\s*(.+)", info.read_text())):
        cpu = m.group(1).strip()
    ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
        java = (done.stderr.splitlines() or ["?"])[0].replace('"', "")
    except OSError:
        java = "no java"
    return (
        f"{os.cpu_count()} cores, {ram_gib:.1f} GiB RAM, {cpu}, {platform.system()}"
        f" {platform.release()}, Python {platform.python_version()}, {java}"
    )


def field(entry: Entry, path: str) -> Any:
    if path == "dlq_exact+lost":
        return f"{entry.get('dlq_exact')} / {entry.get('lost')}"
    if path.endswith("+p99"):
        p50 = field(entry, path.removesuffix("+p99"))
        p99 = field(entry, path.removesuffix("+p99").replace("p50", "p99"))
        return f"{cell(p50)} / {cell(p99)}"
    value: Any = entry
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def markdown(report: Entry) -> str:
    lines = [
        f"Machine: {report['machine']}  ",
        f"Command: `{report.get('command', 'make bench')}` (scale {report.get('scale', 1)}),"
        f" {report.get('when', '')}",
        "",
        "| workload | messages | metric | siding | Parallel Consumer | serial consumer |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for entry in report["workloads"]:
        name = entry["name"]
        if "error" in entry:
            lines.append(
                f"| {name} | {entry.get('messages') or ''} | error: {entry['error']} | | | |"
            )
            continue
        rows = _ROWS.get("pc_table" if name.startswith("pc_table_") else name, ())
        for label, mine, peer, serial in rows:
            if label == _OVER_HTTP and not _ran_over_http(entry):
                continue
            values = [cell(field(entry, p)) if p else "" for p in (mine, peer, serial)]
            lines.append(f"| {name} | {entry['messages']} | {label} | " + " | ".join(values) + " |")
    notes = [n for e in report["workloads"] for n in entry_notes(e)]
    lines += ["", *notes] if notes else []
    sections = (
        hol_section(report),
        floor_section(report),
        curve_section(report),
        throughput_section(report),
        memory_section(report),
    )
    for section in sections:
        lines += ["", *section] if section else []
    return "\n".join(lines) + "\n"


def _ran_over_http(entry: Entry) -> bool:
    base = entry.get("baselines") or {}
    return "parallel_consumer_vertx_seconds" in base


def find(report: Entry, name: str) -> Entry | None:
    """The workload entry called ``name``, if the run has it."""
    return next((e for e in report["workloads"] if e.get("name") == name), None)


def table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """A markdown table; the first ``left`` columns left-aligned, the others right-aligned."""
    align = ["---"] * left + ["---:"] * (len(header) - left)
    return [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def ms(value: Any) -> str:
    """Milliseconds as a whole number with thousands separators (``n/a`` when missing)."""
    return "n/a" if value is None else f"{float(value):,.0f}"


SYSTEM_LABELS = {
    "grpc": "siding, gRPC stream",
    "http": "siding, HTTP webhooks",
    "benthos": "Redpanda Connect's engine (Benthos 4.27), HTTP",
    "parallel_consumer_vertx": "Parallel Consumer over the network (Vert.x), HTTP",
    "siding_grpc_defaults": "siding, gRPC stream, defaults",
    "siding_http_defaults": "siding, HTTP webhooks, defaults",
    "share_group": "Kafka share group (KafkaShareConsumer 4.3.1), HTTP",
}


def _run_cells(run: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(p50, p99, more than once) of one run; ``n/a`` for a run that did not happen."""
    if not run:
        return "n/a", "n/a", "n/a"
    twice = str(run.get("delivered_more_than_once", "n/a"))
    if run.get("delivered") is not None and run.get("delivered") != run.get("expected"):
        twice += f" (delivered {run['delivered']} of {run['expected']})"
    return ms(run.get("fast_p50_ms")), ms(run.get("fast_p99_ms")), twice


def _split(run: Mapping[str, Any] | None) -> str:
    if not run or run.get("redeliveries_retry_attempts") is None:
        return "-" if not run or not run.get("redeliveries") else "not known"
    return f"{run['redeliveries_retry_attempts']} / {run['redeliveries_same_attempt']}"


def _system_row(label: str, route: str, data: Mapping[str, Any]) -> list[str]:
    if data.get("error") and not data.get("with_slow"):
        return [label, route, f"not run: {data['error']}", "", "", "", "", ""]
    p50, p99, twice = _run_cells(data.get("with_slow"))
    q50, q99, twice_without = _run_cells(data.get("without_slow"))
    split = _split(data.get("with_slow"))
    return [label, route, p50, p99, f"{q50} / {q99}", twice, twice_without, split]


def hol_rows(report: Entry) -> list[list[str]]:
    """One row per siding variant, the Spark floor, then each peer, on the HOL traffic."""
    rows = []
    for variant in (find(report, "hol") or {}).get("variants", {}).values():
        label = SYSTEM_LABELS.get(variant.get("transport", ""), variant.get("system", "?"))
        rows.append(_system_row(label, variant.get("route", ""), variant))
    floor = find(report, "spark_floor")
    if floor and floor.get("floor_path"):
        label = f"Spark floor ({floor['floor_path']}, no dispatch)"
        cells = f"{ms(floor.get('p50_ms'))} / {ms(floor.get('p99_ms'))}"
        rows.append([label, "-", "", "", cells, "", "", ""])
    for name, peer in (find(report, "hol_peers") or {}).get("peers", {}).items():
        rows.append(_system_row(SYSTEM_LABELS.get(name, name), "-", peer))
    return rows


def hol_section(report: Entry) -> list[str]:
    hol, peers = find(report, "hol"), find(report, "hol_peers")
    if not (hol and hol.get("variants")) and not (peers and peers.get("peers")):
        return []
    count = (hol or peers or {}).get("messages")
    header = [
        "pushed by",
        "route",
        "fast p50 ms",
        "fast p99 ms",
        "no slow msgs: p50 / p99 ms",
        "delivered more than once",
        "... no slow msgs",
        "redeliveries: retry attempts / same attempt",
    ]
    return [
        f"### Head-of-line blocking: {count} msgs at 200 msg/s, 10 % take 2 s, the rest 10 ms",
        "",
        *table(header, hol_rows(report), left=2),
        "",
        "Tuned route: `hol.TUNED_ROUTE` (max_in_flight 1,000, adaptive off, one retry lane, calls"
        " parked after 20 ms of quiet); defaults: a route with only name, topic, group and"
        " endpoint. Both run with the config's default trigger (0 s). The Spark floor has no slow"
        " messages: compare it with the no-slow columns.",
    ]


def floor_section(report: Entry) -> list[str]:
    floor = find(report, "spark_floor")
    if not floor or not floor.get("paths"):
        return []
    keys = ("addBatch", "walCommit", "commitOffsets", "latestOffset", "queryPlanning")
    header = ["executor path", "p50 ms", "p99 ms", "trigger median ms", *keys, "batches"]
    rows = []
    for path in floor["paths"]:
        if "error" in path:
            rows.append([path["path"], f"error: {path['error']}", *[""] * (len(header) - 2)])
            continue
        durations = path.get("duration_ms_median") or {}
        rows.append(
            [
                path["path"],
                ms(path.get("p50_ms")),
                ms(path.get("p99_ms")),
                ms(path.get("trigger_median_ms")),
                *(ms(durations.get(k)) for k in keys),
                str(path.get("batches", "")),
            ]
        )
    return [
        f"### Spark floor: {floor['messages']} msgs at 200 msg/s, local[2], trigger 0 s, a"
        " Python step that only notes arrival",
        "",
        *table(header, rows),
    ]


def curve_table(entry: Entry) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per system, one ``p50 / p99`` cell per rate."""
    rates = [float(r) for r in entry.get("rates_msgs_per_s", [])]
    header = ["pushed by", *(f"{r:,.0f} msg/s" for r in rates)]
    rows = []
    for name, curve in entry.get("curves", {}).items():
        label = SYSTEM_LABELS.get(name, name)
        if curve.get("points") is None:
            rows.append([label, f"not run: {curve.get('error')}", *[""] * (len(rates) - 1)])
            continue
        by_rate = {float(p["rate_msgs_per_s"]): p for p in curve["points"]}
        rows.append([label, *(_curve_cell(by_rate.get(r)) for r in rates)])
    return header, rows


def _curve_cell(point: Mapping[str, Any] | None) -> str:
    if point is None:
        return "n/a"
    if "error" in point:
        return f"error: {point['error']}"
    text = f"{ms(point.get('p50_ms'))} / {ms(point.get('p99_ms'))}"
    if not point.get("complete", True):
        text += f" ({point.get('delivered')} of {point.get('messages')} delivered)"
    return text


def curve_section(report: Entry) -> list[str]:
    entry = find(report, "latency_curve")
    if not entry or not entry.get("curves"):
        return []
    header, rows = curve_table(entry)
    return [
        f"### Latency against load: fast p50 / p99 ms, 10 ms consumer, 1 partition,"
        f" {entry.get('seconds_per_point')} s of traffic per point",
        "",
        *table(header, rows),
        "",
        f"![latency against load]({CURVE_PNG})",
    ]


def _drain_cells(run: Mapping[str, Any] | None) -> list[str]:
    """(drain s, msgs/s, CPU s per 1,000, more than once) of one throughput run."""
    if run is None:
        return ["n/a"] * 4
    if "error" in run:
        return [f"error: {run['error']}", "", "", ""]
    seconds = cell(run.get("drain_s"))
    if not run.get("complete", True):
        seconds += f" ({run.get('delivered')} delivered)"
    rate = run.get("msgs_per_s")
    return [
        seconds,
        "n/a" if rate is None else f"{float(rate):,.0f}",
        cell(run.get("cpu_s_per_1000")),
        cell(run.get("delivered_more_than_once")),
    ]


def throughput_rows(entry: Entry) -> list[list[str]]:
    """One row per system and partition count."""
    rows = []
    for name, result in entry.get("systems", {}).items():
        label = SYSTEM_LABELS.get(name, name)
        if result.get("runs") is None:
            rows.append([label, "", f"not run: {result.get('error')}", "", "", ""])
            continue
        for run in result["runs"]:
            rows.append([label, str(run.get("partitions")), *_drain_cells(run)])
    return rows


def throughput_section(report: Entry) -> list[str]:
    entry = find(report, "throughput")
    if not entry or not entry.get("systems"):
        return []
    header = [
        "pushed by",
        "partitions",
        "drain s",
        "msgs/s",
        "CPU s per 1,000 msgs",
        "delivered more than once",
    ]
    return [
        f"### Throughput: {entry.get('messages')} msgs already in the topic, 10 ms consumer",
        "",
        *table(header, throughput_rows(entry), left=2),
        "",
        "Drain: first receipt to the last message done. CPU: the system's own process tree over"
        " the drain (siding: driver, Spark JVM, Python workers). siding on its defaults.",
    ]


def memory_section(report: Entry) -> list[str]:
    """Peak RSS (MB) of each system's process tree per workload: one column per system seen."""
    entries = [e for e in report["workloads"] if isinstance(e.get("peak_rss_mb"), Mapping)]
    systems = sorted(
        {s for e in entries for s in e["peak_rss_mb"]}, key=lambda s: (s != "siding", s)
    )
    if not entries:
        return []
    rows = [[e["name"], *(cell(e["peak_rss_mb"].get(s)) for s in systems)] for e in entries]
    return [
        "### Memory",
        "",
        "Peak RSS per workload, MB (each system's process tree, summed RSS, sampled every 0.5 s;"
        " siding: the bench's driver with Spark's JVM and Python workers, the serial consumer"
        " running in it; n/a: the system did not run):",
        "",
        *table(["workload", *systems], rows),
    ]


def entry_notes(entry: Entry) -> list[str]:
    """Footnotes the table needs to be read honestly."""
    name, base = entry["name"], entry.get("baselines") or {}
    notes = [f"{name}: {note}" for note in entry.get("notes", [])]
    if base.get("parallel_consumer_error"):
        notes.append(f"{name}: Parallel Consumer not run: {base['parallel_consumer_error']}")
    if base.get("parallel_consumer_vertx_error"):
        error = base["parallel_consumer_vertx_error"]
        notes.append(f"{name}: Parallel Consumer over the network not run: {error}")
    if base.get("serial_consumer_extrapolated"):
        measured = base.get("serial_consumer_measured_messages")
        window = base.get("serial_consumer_window_s")
        notes.append(f"{name}: serial consumer extrapolated from {measured} messages in {window} s")
    return [f"- {n}" for n in notes]


def build_report(
    machine_text: str,
    entries: Sequence[Entry],
    scale: float,
    when: float,
    command: str = "make bench",
) -> dict[str, Any]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
    return {
        "machine": machine_text,
        "when": stamp,
        "scale": scale,
        "command": command,
        "workloads": list(entries),
    }


def write(report: Entry, folder: Path = RESULTS) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2) + "\n"
    stamp = str(report["when"]).replace(":", "").replace("-", "")
    paths = [folder / "latest.json", folder / f"bench-{stamp}.json", folder / "latest.md"]
    for path, content in zip(paths, (text, text, markdown(report)), strict=True):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(content)
        tmp.replace(path)
    curve = find(report, "latency_curve")
    if curve and curve.get("curves"):
        from bench.plot import plot_curve

        paths.append(plot_curve(curve, folder / CURVE_PNG))
    return paths
