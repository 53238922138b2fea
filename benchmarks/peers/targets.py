"""The report's targets: each named by what it asks, with this run's figure and met or missed.

Plain functions over the results ``python -m benchmarks.peers`` collects (the same dicts its
``--json`` writes), so the verdicts are unit-tested on hand-made figures. A target whose figures
this run did not take (a system or workload left out) is listed as not measured.
"""

from __future__ import annotations

import math
from typing import Any

#: (what the row says, this run's figure, met: True/False, None when not measured)
Row = tuple[str, str, bool | None]

ASYNC_IDEAL_SHARE = 0.9
SLOTS_COST = 0.10
SLOTS_THREADS = (32, 128)


def _ok(*values: float | None) -> bool:
    return all(v is not None and not math.isnan(v) and v > 0 for v in values)


def _get(results: dict[str, Any], system: str, *path: str) -> Any:
    value: Any = results.get(system, {})
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _cpu(results: dict[str, Any], system: str) -> float | None:
    r = results.get(system, {})
    if "worker_cpu_us" not in r:
        return None
    return r["worker_cpu_us"] + r["db_cpu_us"]


def against_pgqueuer(results: dict[str, Any]) -> list[Row]:
    ours, pgq = results.get("ours", {}), results.get("pgqueuer", {})
    rows: list[Row] = []

    def ratio_row(name: str, mine: float | None, theirs: float | None, factor: float) -> None:
        if _ok(mine, theirs):
            rows.append((name, f"{mine / theirs:.2f}x", mine / theirs >= factor))
        else:
            rows.append((name, "not measured", None))

    ratio_row("drain ≥ 1.2x PgQueuer's", ours.get("drain"), pgq.get("drain"), 1.2)
    mine, theirs = _cpu(results, "ours"), _cpu(results, "pgqueuer")
    rows.append(("CPU per drained job (worker + database) ≤ PgQueuer's",
                 f"{mine:,.0f} µs against {theirs:,.0f} µs" if _ok(mine, theirs)
                 else "not measured", mine <= theirs if _ok(mine, theirs) else None))
    ratio_row("bulk enqueue ≥ 1.5x PgQueuer's", ours.get("bulk"), pgq.get("bulk"), 1.5)
    for p in ("p50", "p99"):
        mine, theirs = _get(results, "ours", "pickup", f"{p}_ms"), \
            _get(results, "pgqueuer", "pickup", f"{p}_ms")
        rows.append((f"idle pickup {p} ≤ PgQueuer's",
                     f"{mine:.2f} ms against {theirs:.2f} ms" if _ok(mine, theirs)
                     else "not measured", mine <= theirs if _ok(mine, theirs) else None))
    return rows


def slots(results: dict[str, Any]) -> list[Row]:
    by_threads = {s["threads"]: s for s in results.get("ours", {}).get("slots", ())}
    rows: list[Row] = []
    for threads in SLOTS_THREADS:
        s = by_threads.get(threads)
        name = f"fleet slots (concurrency=64) cost ≤ {SLOTS_COST:.0%} at --threads {threads}"
        if s is None or not _ok(s["capped_drain"], s["uncapped_drain"]):
            rows.append((name, "not measured", None))
            continue
        cost = 1 - s["capped_drain"] / s["uncapped_drain"]
        rows.append((name, f"{cost * 100:.0f} %", cost <= SLOTS_COST))
    return rows


def celery(results: dict[str, Any]) -> list[Row]:
    mine, theirs = _get(results, "ours", "drain"), _get(results, "celery", "drain")
    name = "drain ≥ 5x Celery's (Redis broker, acks_late)"
    if not _ok(mine, theirs):
        return [(name, "not measured", None)]
    return [(name, f"{mine / theirs:.2f}x", mine / theirs >= 5)]


def async_io(results: dict[str, Any], ideal: float) -> list[Row]:
    def rate(system: str) -> float | None:
        return _get(results, system, "workloads", "io-async", "drain")

    mine = rate("ours")
    rows: list[Row] = []
    name = f"async I/O drain ≥ {ASYNC_IDEAL_SHARE:.0%} of ideal"
    rows.append((name, f"{mine / ideal * 100:.0f} % ({mine:,.0f} of {ideal:,.0f} jobs/s)"
                 if _ok(mine) else "not measured",
                 mine / ideal >= ASYNC_IDEAL_SHARE if _ok(mine) else None))
    for system, label in (("pgqueuer", "PgQueuer"), ("procrastinate", "Procrastinate")):
        theirs = rate(system)
        rows.append((f"async I/O drain ahead of {label}'s",
                     f"{mine / theirs:.2f}x" if _ok(mine, theirs) else "not measured",
                     mine > theirs if _ok(mine, theirs) else None))
    return rows


def evaluate(results: dict[str, Any], ideal_async: float) -> list[Row]:
    """Every target's row, in the report's order."""
    return [*against_pgqueuer(results), *slots(results), *celery(results),
            *async_io(results, ideal_async)]


def render(rows: list[Row]) -> str:
    out = ["Targets:", "", "| target | this run | met |", "|---|--:|:-:|"]
    for name, figure, met in rows:
        verdict = "-" if met is None else ("met" if met else "**missed**")
        out.append(f"| {name} | {figure} | {verdict} |")
    return "\n".join(out)
