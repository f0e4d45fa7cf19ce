"""The soak's memory readings: jstat and jcmd output, the flatness verdict, RSS in the sampler."""

from __future__ import annotations

import pytest

from bench.workloads.cpu import ProcStat, SystemPeaks, Usage, parse_stat, rss_by_system, system_of
from bench.workloads.memory import (
    flatness,
    grown_classes,
    last_two_thirds,
    parse_class_histogram,
    parse_jstat_gc,
    parse_pss_kb,
)

JSTAT = """\
    S0C         S1C         S0U         S1U          EC           EU           OC           OU          MC         MU       CCSC      CCSU     YGC     YGCT     FGC    FGCT     CGC    CGCT       GCT
        0.0     4096.0         0.0      4096.0     200704.0      51200.0     319488.0     204800.0   90112.0    88064.0   11264.0   10240.0     57     0.512     0     0.000    12     0.044     0.556
"""  # noqa: E501

HISTOGRAM = """\
 num     #instances         #bytes  class name (module)
-------------------------------------------------------
   1:        120000       52428800  [B (java.base@17.0.15)
   2:         80000        1920000  java.lang.String (java.base@17.0.15)
   3:          1000          64000  org.apache.spark.sql.execution.ui.SQLExecutionUIData
Total        201000       54412800
"""


def test_jstat_gc_sums_the_generations_into_used_and_committed() -> None:
    heap = parse_jstat_gc(JSTAT)
    assert heap.used_mb == round((4096 + 51200 + 204800) / 1024, 1)  # 254.0
    assert heap.committed_mb == round((4096 + 200704 + 319488) / 1024, 1)  # 512.0
    assert heap.metaspace_mb == 86.0
    assert heap.full_gcs == 0


def test_jstat_without_values_or_columns_says_what_it_got() -> None:
    with pytest.raises(ValueError, match="no values"):
        parse_jstat_gc("12345 not found\n")
    with pytest.raises(ValueError, match="lacks the columns"):
        parse_jstat_gc("A B\n1 2\n")


def test_class_histogram_and_what_grew() -> None:
    after = parse_class_histogram(HISTOGRAM)
    assert after["[B"] == (120000, 52428800)
    assert after["org.apache.spark.sql.execution.ui.SQLExecutionUIData"] == (1000, 64000)
    assert "Total" not in after
    before = {"[B": (100000, 52000000), "java.lang.String": (90000, 2000000)}
    grown = grown_classes(before, after)
    # String shrank: not listed; the UI data is new; [B grew least of the two that grew.
    assert [r["class"] for r in grown] == [
        "[B",
        "org.apache.spark.sql.execution.ui.SQLExecutionUIData",
    ]
    assert grown[1]["bytes_before"] == 0


def test_a_step_up_is_growth_a_spike_is_not() -> None:
    flat = [(float(t), 1000.0) for t in range(0, 600)]
    spiked = [(t, 1500.0 if t == 300.0 else mb) for t, mb in flat]
    verdict = flatness(spiked, (200.0, 600.0))
    assert verdict.flat
    assert verdict.growth == 0.0
    stepped = [(t, 1200.0 if t >= 480 else mb) for t, mb in flat]
    verdict = flatness(stepped, (200.0, 600.0))
    assert not verdict.flat
    assert verdict.growth == 0.2
    assert (verdict.start_mb, verdict.highest_mb, verdict.end_mb) == (1000.0, 1200.0, 1200.0)
    creep = [(t, 1000.0 + t * 0.05) for t, _ in flat]  # +20 MB over the window: 2 %
    assert flatness(creep, (200.0, 600.0)).flat


def test_the_window_is_the_last_two_thirds_and_must_hold_samples() -> None:
    assert last_two_thirds((30.0, 630.0)) == (230.0, 630.0)
    with pytest.raises(ValueError, match="no samples"):
        flatness([(1.0, 10.0)], (5.0, 9.0))


def test_stat_rss_is_pages_times_the_page_size() -> None:
    fields = ["S", "42"] + ["0"] * 19 + ["250"] + ["0"] * 30
    assert parse_stat("7 (java) " + " ".join(fields), page_bytes=4096).rss == 250 * 4096


def test_usage_keeps_the_peak_sample_and_the_series_on_request() -> None:
    usage = Usage(keep_series=True)
    jvm, worker = ProcStat(2, 1, 0, name="java", rss=500), ProcStat(3, 2, 0, name="python3")
    usage.sample([ProcStat(1, 0, 0, rss=100), jvm, worker], at=1.0, root=1, root_kind="driver")
    usage.sample([ProcStat(1, 0, 0, rss=100), ProcStat(2, 1, 0, name="java", rss=900)], at=2.0,
                 root=1, root_kind="driver")  # fmt: skip
    usage.sample([ProcStat(1, 0, 0, rss=100), jvm], at=3.0, root=1, root_kind="driver")
    assert [s.total for s in usage.series] == [600, 1000, 600]
    assert usage.series[0].by_pid == {1: 100, 2: 500, 3: 0}
    assert usage.peak is not None
    assert usage.peak.total == 600  # one sample's 1,000 is a spike (a fork before its exec)
    for at in (4.0, 5.0):  # held for two samples more: the peak
        usage.sample([ProcStat(1, 0, 0, rss=100), ProcStat(2, 1, 0, name="java", rss=800)],
                     at=at, root=1, root_kind="driver")  # fmt: skip
    assert usage.peak.total == 900
    assert usage.peak.by_kind == {"driver": 100, "Spark JVM": 800}


def test_each_child_of_the_bench_is_named_by_its_command_line() -> None:
    java = "/usr/bin/java -cp x.jar "
    assert system_of(java + "dev.siding.bench.share.ShareMain b t g u 84 1") == "share group"
    assert system_of(java + "dev.siding.bench.VertxMain b t unordered") == (
        "Parallel Consumer over HTTP"
    )
    assert system_of(java + "dev.siding.bench.Main b t") == "Parallel Consumer in-process"
    assert system_of("/w/bench/peers/benthos/target/benthos -c c.yaml") == "Redpanda Connect"
    # building the peer is not the peer, though its output path is on the command line
    assert system_of("/t/go/bin/go build -o /w/bench/peers/benthos/target/benthos .") == (
        "peer build"
    )
    assert system_of("python -c ... sim consumer --listen x") == "simulated consumer"
    assert system_of("sleep 1") == "other"


def test_peaks_give_siding_its_jvm_and_workers_and_each_peer_its_own_tree() -> None:
    bench = 100
    cmdlines = {7: "java dev.siding.bench.VertxMain", 8: "python sim consumer"}
    peaks = SystemPeaks(bench, read_cmdline=lambda pid: cmdlines.get(pid, ""))
    driver, spark = ProcStat(bench, 1, 0, rss=300), ProcStat(5, bench, 0, name="java", rss=900)
    worker = ProcStat(6, 5, 0, name="python3", rss=100)
    peaks([driver, spark, worker])  # the first sample: the Spark JVM is there already
    peer, peer_thread = ProcStat(7, bench, 0, rss=400), ProcStat(9, 7, 0, rss=50)
    sim = ProcStat(8, bench, 0, rss=80)
    peaks([driver, spark, worker, peer, peer_thread, sim])
    peaks([driver, spark, worker, peer, peer_thread, sim])
    peaks([driver, ProcStat(5, bench, 0, name="java", rss=1000), sim])  # the peer ended
    peaks([driver, ProcStat(5, bench, 0, name="java", rss=5000), sim])  # one sample: a spike
    assert peaks.peaks == {"siding": 1300, "Parallel Consumer over HTTP": 450,
                           "simulated consumer": 80}  # fmt: skip
    assert rss_by_system([driver, spark, worker, peer, peer_thread], bench, {7: "pc"}) == {
        "siding": 1300,
        "pc": 450,
    }


def test_pss_is_read_from_smaps_rollup_and_its_absence_is_an_error() -> None:
    rollup = (
        "55d0c0a00000-7ffd1c3f5000 ---p 00000000 00:00 0   [rollup]\n"
        "Rss:               97280 kB\n"
        "Pss:               41873 kB\n"
        "Pss_Anon:          30000 kB\n"
        "Shared_Clean:      50000 kB\n"
    )
    assert parse_pss_kb(rollup) == 41873
    with pytest.raises(ValueError, match="Pss"):
        parse_pss_kb("Rss: 97280 kB\n")
