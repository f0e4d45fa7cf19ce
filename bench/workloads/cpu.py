"""CPU seconds and resident memory of a process tree from /proc, leaving out chosen subtrees
(Linux only).

``CpuMeter`` samples the tree while a workload runs and adds up what each process used since it
was first seen (a process that started in the window counts whole, one that ended counts up to
its last sample). Two snapshots of the tree's totals are not enough: a process of an earlier
workload that ends inside the window takes its whole lifetime's CPU out of the sum (the
2026-11-23 22:42 ``make bench`` measured -0.75 CPU s per 1,000 messages that way).

The same samples give the tree's resident memory (RSS, the sum over its processes: pages that
forked Python workers share are counted in each, as ``ps`` and ``top`` count them): its peak, the
split by kind at that peak, and on request the whole series (``python -m bench.soak``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TypeVar

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
MB = 1024 * 1024

_all_overhead_lock = threading.Lock()
_all_overhead_s = 0.0  # the sampling CPU of every meter in this process, so far


def sampling_overhead_s() -> float:
    """CPU seconds every ``CpuMeter`` of this process has spent sampling so far: a window's
    difference is what the sampling took from this process (the bench's own, e.g. ``make
    bench``'s per-workload RSS meter, counted out of siding's driver)."""
    with _all_overhead_lock:
        return _all_overhead_s


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    ppid: int
    ticks: int  # utime + stime + cutime + cstime: reaped children stay counted
    own: int = 0  # utime + stime: this process alone
    start: int = 0  # start time in ticks since boot: a pid used again is another process
    name: str = ""
    rss: int = 0  # resident set size in bytes


def parse_stat(text: str, page_bytes: int = PAGE_BYTES) -> ProcStat:
    """One /proc/<pid>/stat line; the command name may itself hold spaces and parentheses."""
    pid, _, rest = text.partition(" (")
    close = rest.rindex(")")
    fields = rest[close + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14-17, starttime 22,
    # rss (pages) 24.
    return ProcStat(
        int(pid),
        int(fields[1]),
        sum(int(f) for f in fields[11:15]),
        own=int(fields[11]) + int(fields[12]),
        start=int(fields[19]),
        name=rest[:close],
        rss=int(fields[21]) * page_bytes,
    )


def tree(stats: Mapping[int, ProcStat], root: int, exclude: Collection[int]) -> list[ProcStat]:
    """``root`` and its descendants, without the subtrees rooted at ``exclude``."""
    children: dict[int, list[int]] = {}
    for s in stats.values():
        children.setdefault(s.ppid, []).append(s.pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in exclude or pid not in stats:
            continue
        found.append(stats[pid])
        todo.extend(children.get(pid, ()))
    return found


def tree_ticks(stats: Mapping[int, ProcStat], root: int, exclude: Collection[int]) -> int:
    """Ticks of ``root`` and its descendants, without the subtrees rooted at ``exclude``."""
    return sum(s.ticks for s in tree(stats, root, exclude))


def kind_of(stat: ProcStat, root: int, root_kind: str = "driver (Python)") -> str:
    """Which part of siding a process is, for the cost breakdown (``root_kind``: the root's)."""
    if stat.pid == root:
        return root_kind
    if stat.name == "java":
        return "Spark JVM"
    if stat.name.startswith("python"):
        return "Spark Python workers"
    return stat.name or "other"


def rss_by_kind(procs: Iterable[ProcStat], root: int, root_kind: str) -> dict[str, int]:
    """Resident bytes of ``procs`` per kind (``kind_of``)."""
    rss: Counter[str] = Counter()
    for p in procs:
        rss[kind_of(p, root, root_kind)] += p.rss
    return dict(rss)


# A peak must hold for the median of this many samples: a process forked by the JVM (Hadoop's
# shell calls for local checkpoint files) shows the JVM's whole RSS until it execs, for one
# sample at most (the 2026-11-27 soak: +678 MB in single samples, 1,656 MB either side).
STEADY_SAMPLES = 3
T = TypeVar("T")


def steady(recent: Collection[T], size: Callable[[T], float]) -> T:
    """The median of the last samples (the lower one of two): what a one-sample spike cannot
    raise."""
    ranked = sorted(recent, key=size)
    return ranked[(len(ranked) - 1) // 2]


@dataclass(frozen=True, slots=True)
class RssSample:
    """The tree's resident bytes at one sample: per kind, and per process (pid -> bytes)."""

    at: float  # time.monotonic()
    by_kind: dict[str, int]
    by_pid: dict[int, int]

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())


@dataclass
class Usage:
    """Own ticks per process (by pid and start time): at first sight, and at the last sample;
    the tree's resident memory at its peak sample (and every sample when ``keep_series``)."""

    first: dict[tuple[int, int], int] = field(default_factory=dict)
    last: dict[tuple[int, int], ProcStat] = field(default_factory=dict)
    started: bool = False
    peak: RssSample | None = None
    keep_series: bool = False
    series: list[RssSample] = field(default_factory=list)
    recent: deque[RssSample] = field(default_factory=lambda: deque(maxlen=STEADY_SAMPLES))

    def sample(
        self, procs: Iterable[ProcStat], at: float = 0.0, root: int = 0, root_kind: str = ""
    ) -> None:
        procs = list(procs)
        for p in procs:
            key = (p.pid, p.start)
            # Seen at the first sample: what it used before does not count; born later: all.
            self.first.setdefault(key, p.own if not self.started else 0)
            self.last[key] = p
        self.started = True
        now = RssSample(at, rss_by_kind(procs, root, root_kind), {p.pid: p.rss for p in procs})
        self.recent.append(now)
        held = steady(self.recent, lambda s: s.total)
        if self.peak is None or held.total > self.peak.total:
            self.peak = held
        if self.keep_series:
            self.series.append(now)

    def ticks_by_kind(self, root: int, root_kind: str = "driver (Python)") -> dict[str, int]:
        used: Counter[str] = Counter()
        for key, p in self.last.items():
            used[kind_of(p, root, root_kind)] += p.own - self.first[key]
        return dict(used)


class CpuMeter:
    """``meter = CpuMeter(root, exclude).start()`` ... ``meter.stop()`` (or ``with``); then
    ``meter.seconds`` and ``meter.by_kind``. ``meter.now()`` samples at once and returns the
    seconds so far (a split inside the window). ``overhead_s`` is the CPU the sampling itself
    took in this process: part of the tree when ``root`` is this process. ``peak_rss`` is the
    tree's resident memory at its highest sample; with ``keep_series`` every sample is kept
    (``rss_series``)."""

    def __init__(
        self,
        root: int,
        exclude: Collection[int],
        interval_s: float = 0.2,
        root_kind: str = "driver (Python)",
        *,
        keep_series: bool = False,
        on_sample: Callable[[list[ProcStat]], None] | None = None,
    ) -> None:
        self._root, self._exclude, self._interval_s = root, set(exclude), interval_s
        self._root_kind = root_kind
        self._on_sample = on_sample
        self._usage = Usage(keep_series=keep_series)
        self._lock = threading.Lock()
        self._overhead_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)

    def _sample(self) -> None:
        global _all_overhead_s  # noqa: PLW0603 (one counter for every meter of the process)
        began = time.thread_time()
        with self._lock:
            procs = tree(read_stats(), self._root, self._exclude)
            self._usage.sample(procs, time.monotonic(), self._root, self._root_kind)
            if self._on_sample is not None:
                self._on_sample(procs)
            spent = time.thread_time() - began
            self._overhead_s += spent
        with _all_overhead_lock:
            _all_overhead_s += spent

    def now(self) -> float:
        """Sample now; the tree's CPU seconds since the start."""
        self._sample()
        return self.seconds

    @property
    def overhead_s(self) -> float:
        with self._lock:
            return self._overhead_s

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def start(self) -> CpuMeter:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self._sample()

    def __enter__(self) -> CpuMeter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def by_kind(self) -> dict[str, float]:
        with self._lock:
            ticks = self._usage.ticks_by_kind(self._root, self._root_kind)
        return {k: t / TICKS_PER_S for k, t in ticks.items()}

    @property
    def seconds(self) -> float:
        return sum(self.by_kind.values())

    @property
    def peak_rss(self) -> RssSample | None:
        with self._lock:
            return self._usage.peak

    @property
    def rss_series(self) -> list[RssSample]:
        with self._lock:
            return list(self._usage.series)


def peak_rss_fields(meter: CpuMeter) -> dict[str, object]:
    """The report's fields for a meter's peak: MB in all, and MB per kind at that sample."""
    peak = meter.peak_rss
    if peak is None:
        return {"peak_rss_mb": None}
    return {
        "peak_rss_mb": round(peak.total / MB),
        "peak_rss_mb_by_process": {k: round(v / MB) for k, v in sorted(peak.by_kind.items())},
    }


SIDING = "siding"
# A child process of the bench, by what its command line holds: which system it is.
_SYSTEMS = (
    ("go build", "peer build"),
    ("plexus.classworlds", "peer build"),  # mvn
    ("dev.siding.bench.share.ShareMain", "share group"),
    ("dev.siding.bench.VertxMain", "Parallel Consumer over HTTP"),
    ("dev.siding.bench.RetryMain", "Parallel Consumer (key retry)"),
    ("dev.siding.bench.Main", "Parallel Consumer in-process"),
    ("peers/benthos/target", "Redpanda Connect"),
    ("sim consumer", "simulated consumer"),
)


def system_of(cmdline: str) -> str:
    """Which system a child of the bench is, from its command line (``other`` if none)."""
    return next((label for text, label in _SYSTEMS if text in cmdline), "other")


def rss_by_system(
    procs: Iterable[ProcStat], root: int, labels: Mapping[int, str]
) -> dict[str, int]:
    """Resident bytes per system: each labelled child of ``root`` with its subtree under its
    label; ``root`` and its other children (Spark's JVM and its Python workers) are siding."""
    procs = list(procs)
    parent = {p.pid: p.ppid for p in procs}
    found: Counter[str] = Counter()
    for p in procs:
        pid, label = p.pid, SIDING
        while pid != root and pid in parent:
            if pid in labels:
                label = labels[pid]
                break
            pid = parent[pid]
        found[label] += p.rss
    return dict(found)


class SystemPeaks:
    """A ``CpuMeter``'s ``on_sample`` for a whole workload of the bench (``root``: this
    process): the peak RSS of each system's process tree. The children ``root`` has at the
    first sample (Spark's JVM) are siding's; each child born later is labelled by its command
    line (``system_of``): a peer, the simulated consumer."""

    def __init__(self, root: int, read_cmdline: Callable[[int], str] | None = None) -> None:
        self._root = root
        self._read_cmdline = read_cmdline or _cmdline
        self._at_start: set[int] | None = None
        self._labels: dict[int, str] = {}
        self._recent: deque[dict[str, int]] = deque(maxlen=STEADY_SAMPLES)
        self.peaks: dict[str, int] = {}

    def __call__(self, procs: list[ProcStat]) -> None:
        children = {p.pid for p in procs if p.ppid == self._root}
        if self._at_start is None:
            self._at_start = children
        for pid in children - self._at_start - self._labels.keys():
            self._labels[pid] = system_of(self._read_cmdline(pid))
        self._recent.append(rss_by_system(procs, self._root, self._labels))
        for label in {k for sample in self._recent for k in sample}:
            held = steady([sample.get(label, 0) for sample in self._recent], float)
            self.peaks[label] = max(self.peaks.get(label, 0), held)

    def report(self) -> dict[str, int]:
        """MB per system (the simulated consumer and other helpers left out)."""
        left_out = ("simulated consumer", "peer build", "other")
        return {k: round(v / MB) for k, v in sorted(self.peaks.items()) if k not in left_out}


def _cmdline(pid: int) -> str:
    try:
        text = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return text.replace(b"\0", b" ").decode(errors="replace")


def read_stats(proc: Path = Path("/proc")) -> dict[int, ProcStat]:
    stats: dict[int, ProcStat] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stat = parse_stat((entry / "stat").read_text())
            except (OSError, ValueError, IndexError):
                continue  # the process ended while we looked
            stats[stat.pid] = stat
    return stats


def tree_cpu_s(root: int, exclude: Collection[int]) -> float:
    return tree_ticks(read_stats(), root, exclude) / TICKS_PER_S


def children_of(pid: int, stats: Mapping[int, ProcStat] | None = None) -> set[int]:
    return {s.pid for s in (stats or read_stats()).values() if s.ppid == pid}
