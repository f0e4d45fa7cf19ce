"""The latency-against-load chart (PNG) from a ``latency_curve`` entry."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def curve_series(entry: Mapping[str, Any]) -> dict[str, list[tuple[float, float, float]]]:
    """Per system, its measured points as (rate, p50, p99); points without numbers left out."""
    series: dict[str, list[tuple[float, float, float]]] = {}
    for name, curve in entry.get("curves", {}).items():
        points = [
            (float(p["rate_msgs_per_s"]), float(p["p50_ms"]), float(p["p99_ms"]))
            for p in curve.get("points") or []
            if p.get("p50_ms") is not None and p.get("p99_ms") is not None
        ]
        if points:
            series[name] = sorted(points)
    return series


def plot_curve(entry: Mapping[str, Any], path: Path) -> Path:
    """p50 (solid) and p99 (dashed) against the offered rate, both axes logarithmic."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from bench.report import SYSTEM_LABELS

    fig, ax = plt.subplots(figsize=(11, 5), dpi=110)
    series = curve_series(entry)
    for index, (name, points) in enumerate(series.items()):
        color = f"C{index}"
        rates = [p[0] for p in points]
        label = SYSTEM_LABELS.get(name, name)
        ax.plot(rates, [p[1] for p in points], "o-", color=color, label=f"{label}: p50")
        ax.plot(rates, [p[2] for p in points], "s--", color=color, label=f"{label}: p99")
    ax.set_xscale("log")
    ax.set_yscale("log")
    rates = [float(r) for r in entry.get("rates_msgs_per_s", [])]
    if rates:
        ax.set_xticks(rates, [f"{r:,.0f}" for r in rates])
        ax.minorticks_off()
    ax.set_xlabel("offered load (msg/s, 1 partition)")
    ax.set_ylabel("produce -> consumer receipt (ms)")
    ax.set_title("Latency against load (10 ms consumer)")
    ax.grid(True, which="both", alpha=0.3)
    if series:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.text(0.5, 0.5, "no points measured", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
