"""The report of ``python -m benchmarks.scale``: every figure as a Markdown table, each against
its target (met or missed), and the targets gathered at the end."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

from benchmarks.peers import common

#: The product's targets.
HOT_RATIO = 0.9  # drains and pickup with the history, against the empty tables
PAGE_MS = 200.0  # admin app index and jobs list; the same pages on SQLite
STATS_MS = 50.0  # a stats view
PRUNE_S = 30.0  # pruning --prune-rows finished jobs
PRUNE_DRAIN_RATIO = 0.8  # a drain beside the prune, against alone
PRUNE_LEAD = 6.0  # seconds of the drain before the prune starts (benchmarks.scale)
SIZE_GROWTH = 1.10  # the tables after the last cycle, against after the first prune
#: The read paths the page targets hold for.
TARGET_PAGES = ("admin: app index", "admin: jobs list")
#: The read path of the stats view (django_ultjobs.urls, with the bearer token).
STATS_PATH = "stats view"
#: Each target read path's bound.
TARGETS_MS = {**dict.fromkeys(TARGET_PAGES, PAGE_MS), STATS_PATH: STATS_MS}

#: (target, figure, met) of every target judged, in the report's order.
Targets = list[tuple[str, str, bool]]


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def judge(targets: Targets, what: str, figure: str, ok: bool) -> str:
    """Record one target's verdict; return the cell that shows it."""
    targets.append((what, figure, ok))
    return verdict(ok)


def short(result: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:,.1f}" if isinstance(v, float) else f"{k} {v:,}"
                     for k, v in result.items() if isinstance(v, int | float))


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def total_bytes(sizes: dict[str, int]) -> int:
    return sum(sizes.values())


# -- the hot paths --------------------------------------------------------------------------------


def _ratio_row(targets: Targets, name: str, empty: list[float], hist: list[float],
               higher_better: bool, unit: str, target: float | None) -> str:
    e, h = statistics.median(empty), statistics.median(hist)
    ratio = h / e if higher_better else e / h
    pairs = [(y / x if higher_better else x / y) for x, y in zip(empty, hist, strict=False)]
    spread = f"{min(pairs):.2f} to {max(pairs):.2f}" if len(pairs) > 1 else "-"
    goal = "-"
    if target:
        goal = f"≥ {target:.1f}x: " + judge(
            targets, f"{name} with the history ≥ {target:.1f}x of empty", f"{ratio:.2f}x",
            ratio >= target)
    digits = 0 if unit == "jobs/s" else 2
    return (f"| {name} | {e:,.{digits}f} {unit} | {h:,.{digits}f} {unit} | {ratio:.2f}x "
            f"| {spread} | {goal} |")


def hot_table(hot: dict[str, dict[str, list[dict[str, Any]]]], targets: Targets) -> list[str]:
    empty, hist = hot["empty"], hot["hist"]
    lines = ["HIST as fast as EMPTY: jobs/s HIST over EMPTY, or a latency EMPTY over HIST "
             "(below 1: HIST is slower). Pairs: the lowest and highest of the pairs' own ratios.",
             "", "| figure | EMPTY | HIST | HIST as fast as EMPTY | pairs | target |",
             "| --- | --: | --: | --: | --- | --- |"]
    for key in sorted(k for k in empty if k.startswith("drain_")):
        lines.append(_ratio_row(targets, f"drain {key[6:]}", [r["jobs_per_s"] for r in empty[key]],
                                [r["jobs_per_s"] for r in hist[key]], True, "jobs/s", HOT_RATIO))
    if "pickup" in empty:
        pooled = {side: common.pooled_pickup(hot[side]["pickup"]) for side in ("empty", "hist")}
        for p in ("p50_ms", "p99_ms"):
            lines.append(_ratio_row(targets, f"idle pickup {p[:3]} (all samples)",
                                    [pooled["empty"][p]], [pooled["hist"][p]], False, "ms",
                                    HOT_RATIO))
            lines.append(_ratio_row(targets, f"idle pickup {p[:3]}, per block",
                                    [r[p] for r in empty["pickup"]],
                                    [r[p] for r in hist["pickup"]], False, "ms", None))
    if "single" in empty:
        for key, label in (("single_commit_ms", "enqueue() with its commit"),
                           ("single_txn_ms", "enqueue() in a transaction")):
            lines.append(_ratio_row(targets, label, [r[key] for r in empty["single"]],
                                    [r[key] for r in hist["single"]], False, "ms", None))
    return lines


# -- the read paths -------------------------------------------------------------------------------


def _median_of(runs: list[dict[str, Any]], name: str) -> dict[str, float] | None:
    found = [p for r in runs for p in r["paths"] if p["name"] == name]
    if not found:
        return None
    return {"ms": statistics.median(p["median_ms"] for p in found),
            "sql_ms": statistics.median(p["sql_ms"] for p in found),
            "queries": found[-1]["queries"]}


def reads_table(reads: dict[str, dict[str, Any]], targets: Targets) -> list[str]:
    labels = list(reads)
    names = list(dict.fromkeys(p["name"] for entry in reads.values() for r in entry["runs"]
                               for p in r["paths"]))
    lines = ["Each cell: the median time in ms (statements run, ms of it in SQL); with pairs, "
             "the median of the pairs' medians.", "",
             "| read path | " + " | ".join(labels) + " | target |",
             "| --- |" + " --: |" * len(labels) + " --- |"]
    for name in names:
        cells, goals = [], []
        for label in labels:
            got = _median_of(reads[label]["runs"], name)
            cells.append("-" if got is None else
                         f"{got['ms']:,.0f} ({got['queries']} q, {got['sql_ms']:,.0f} SQL)")
            if got is not None and name in TARGETS_MS and reads[label]["target"]:
                goals.append(judge(targets, f"{name} ≤ {TARGETS_MS[name]:.0f} ms, {label}",
                                   f"{got['ms']:,.1f} ms", got["ms"] <= TARGETS_MS[name]))
        goal = (f"≤ {TARGETS_MS[name]:.0f} ms: " + ", ".join(goals)) if goals else "-"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {goal} |")
    return lines


def plans_text(label: str, result: dict[str, Any]) -> str:
    """Every explained statement of one read-paths run, for the plans file."""
    out = [f"######## {label}"]
    for path in result["paths"]:
        out.append(f"==== {path['name']}: median {path['median_ms']:.1f} ms, "
                   f"{path['queries']} statements, {path['sql_ms']:.0f} ms in SQL")
        for (ms, sql), plan in zip(path["slowest"], path["plans"], strict=False):
            out.append(f"---- {ms:.1f} ms\n{sql}\n{plan}")
    return "\n".join(out)


# -- the prune ------------------------------------------------------------------------------------


def _locks_held(prune_locks: list[list[Any]]) -> str:
    """The prune's table locks by mode (its indexes' locks follow its tables')."""
    by_mode: dict[str, set[str]] = {}
    for locktype, relation, mode, _granted in prune_locks:
        name = relation.removeprefix("django_ultjobs_") if relation else locktype
        by_mode.setdefault(mode, set()).add(name)
    return "; ".join(f"{mode} on {', '.join(sorted(rels))}"
                     for mode, rels in sorted(by_mode.items()))


def through_rates(per_second: dict[str, int], start: float, end: float) -> dict[str, float]:
    """A drain's jobs/s in the whole seconds before, during and after ``start``..``end`` (its
    first and last second, partly idle, left out), and during against before and after."""
    counts = {int(k): n for k, n in per_second.items()}
    first, last = min(counts) + 1, max(counts)
    # After: as long as before, right after the prune (a long drain slows as its own dead rows
    # pile up, so the windows next to the prune's are its pace alone).
    before = max(0, math.floor(start) - first)
    windows = {"before": (first, math.floor(start)), "during": (math.ceil(start),
                                                                  math.floor(end)),
               "after": (math.ceil(end), min(last, math.ceil(end) + before))}
    rates: dict[str, float] = {}
    jobs: dict[str, int] = {}
    for name, (lo, hi) in windows.items():
        seconds = max(0, hi - lo)
        jobs[name] = sum(counts.get(t, 0) for t in range(lo, hi))
        rates[f"{name}_s"] = seconds
        rates[name] = jobs[name] / seconds if seconds else float("nan")
    outside_s = rates["before_s"] + rates["after_s"]
    rates["outside"] = (jobs["before"] + jobs["after"]) / outside_s if outside_s else float("nan")
    rates["ratio"] = rates["during"] / rates["outside"] if outside_s else float("nan")
    return rates


def series(per_second: dict[str, int]) -> list[int]:
    """A drain's jobs finished in each second, from its first."""
    seconds = [int(t) for t in per_second]
    return [per_second.get(str(t), 0) for t in range(min(seconds), max(seconds) + 1)]


def against_control(treated: list[int], control: list[int], start: float,
                    seconds: float) -> dict[str, float]:
    """The drain the prune ran beside against a drain alone of as many jobs, second by second
    from each one's first: the jobs of the seconds the prune ran, over the control's same
    seconds, scaled by the same ratio of the seconds before the prune (each run's own pace on
    a shared machine)."""
    # The first and last second of each drain are partly idle.
    end = min(len(treated), len(control)) - 1
    lead = range(1, min(math.floor(start), end))
    lo, hi = math.ceil(start), min(math.floor(start + seconds), end)
    if hi <= lo or not lead:  # the drain ended before the prune began
        return {"control_during": float("nan"), "control_before": float("nan"),
                "control_ratio": float("nan"), "control_seconds": 0}
    during = sum(treated[lo:hi]) / max(sum(control[lo:hi]), 1)
    before = sum(treated[t] for t in lead) / max(sum(control[t] for t in lead), 1)
    return {"control_during": during, "control_before": before,
            "control_ratio": during / before if before else float("nan"),
            "control_seconds": max(0, hi - lo)}


def prune_lines(prunes: dict[str, dict[str, Any]], targets: Targets) -> list[str]:
    """Each prune, beside its own drain."""
    lines: list[str] = []
    for workload, prune in prunes.items():
        lines += ["", f"Beside the {workload} drain:", "", *_prune_lines(workload, prune, targets)]
    return lines[1:]


def _prune_lines(workload: str, prune: dict[str, Any], targets: Targets) -> list[str]:
    through = prune["through"]
    ratio, control = through["ratio"], through["control_ratio"]
    waits = prune["waits"]
    seconds = prune["seconds"]
    blocked = waits["worker_blocked_by_prune"]
    options = " ".join(filter(None, [prune.get("args", ""), prune.get("pgoptions", "") and
                                     f"(PGOPTIONS {prune['pgoptions']})"]))
    return [
        f"- `prunejobs --days {prune['days']:.2f}{' ' + options if options else ''}`: "
        f"**{seconds:.1f} s** wall, the command's start included (≤ {PRUNE_S:.0f} s: "
        + judge(targets, f"prune ≤ {PRUNE_S:.0f} s beside the {workload} drain",
                f"{seconds:.1f} s", seconds <= PRUNE_S)
        + f"): {prune['output']}",
        f"- one {workload} drain of {prune['drain']['jobs']:,} jobs "
        f"({prune['drain']['jobs_per_s']:,.0f} jobs/s over all), the prune started "
        f"{PRUNE_LEAD:.0f} s into it: "
        f"{through['before']:,.0f} jobs/s in the {through['before_s']:.0f} s before it, "
        f"{through['during']:,.0f} in the {through['during_s']:.0f} s beside it, "
        f"{through['after']:,.0f} in the {through['after_s']:.0f} s after it: {ratio:.2f}x; "
        f"against the same {through['control_seconds']:.0f} s of a drain alone right after "
        f"({through['control_during']:.2f}x of its jobs, {through['control_before']:.2f}x "
        f"before the prune): **{control:.2f}x** (≥ {PRUNE_DRAIN_RATIO}x: "
        + judge(targets, f"{workload} drain beside the prune ≥ {PRUNE_DRAIN_RATIO}x of alone",
                f"{control:.2f}x", control >= PRUNE_DRAIN_RATIO) + ")",
        *(["- **the drain ended before the prune did**: its figures cover part of the prune "
            "alone (a longer drain: `THROUGH_JOBS`)"] if not through["after_s"] else []),
        f"- write-ahead log while the prune ran: {prune['wal_bytes'] / 2**20:,.0f} MiB, "
        f"{prune['wal_bytes'] / max(_pruned_jobs(prune['output']), 1):,.0f} bytes per job "
        "pruned (the drain's beside it included)",
        f"- {waits['samples']:,} samples of `pg_stat_activity` every 50 ms: a worker's backend "
        f"blocked by the prune's in **{blocked}** ("
        + judge(targets, f"no claim or settle of the {workload} drain waits on the prune",
                f"{blocked} samples blocked", blocked == 0) + ")",
        "- backends seen (role, state: samples): " + "; ".join(
            f"{k} {n}" for k, n in sorted(waits["seen"].items())),
        "- waits seen (backend, wait event, samples): " + "; ".join(
            f"{who} {event} {n}" for who, event, n in waits["waits"][:12]),
        "- blocks seen (waiting backend, event, blocked by, statement, samples): " + (
            "; ".join(f"{who} {event} by {by}: `{query[:70]}` {n}"
                      for who, event, by, query, n in waits["blocked"][:8]) or "none"),
        "- locks the prune's backend held (tables; their indexes alike): "
        + _locks_held(waits["prune_locks"]),
    ]


def _pruned_jobs(output: str) -> int:
    match = re.search(r"pruned (\d+) jobs", output)
    return int(match[1]) if match else 0


def _pruned(output: str) -> str:
    match = re.search(r"pruned (\d+) jobs \((\d+) attempts", output)
    return f"{int(match[1]):,} jobs, {int(match[2]):,} attempts" if match else "-"


def cycles_table(cycles: list[dict[str, Any]], targets: Targets) -> list[str]:
    lines = ["| cycle | pruned | prune s | WAL MiB | job heap MiB | job indexes MiB "
             "| attempts MiB | total MiB |", "| --- | --- | --: | --: | --: | --: | --: | --: |"]
    for i, c in enumerate(cycles):
        sizes = c["sizes"]
        heap = sizes.get("django_ultjobs_job", 0)
        attempts = sum(v for k, v in sizes.items() if "attempt" in k and "job_attempt" not in k)
        indexes = total_bytes(sizes) - heap - attempts
        lines.append(f"| {i or 'after the first prune'} | {_pruned(c.get('prune_output', ''))} "
                     f"| {c.get('prune_s', 0):.1f} | {mib(c.get('wal_bytes', 0))} "
                     f"| {mib(heap)} | {mib(indexes)} | {mib(attempts)} "
                     f"| {mib(total_bytes(sizes))} |")
    first, last = total_bytes(cycles[0]["sizes"]), total_bytes(cycles[-1]["sizes"])
    growth = last / first
    grew = sorted(((size / cycles[0]["sizes"][name], name, size)
                   for name, size in cycles[-1]["sizes"].items()
                   if cycles[0]["sizes"].get(name)), reverse=True)[:5]
    lines += ["", "Grew the most, first to last: " + ", ".join(
        f"{name} {mib(cycles[0]['sizes'][name])} to {mib(size)} MiB ({ratio:.2f}x)"
        for ratio, name, size in grew) + "; the biggest after the last cycle: " + ", ".join(
        f"{name} {mib(size)}" for name, size in sorted(
            cycles[-1]["sizes"].items(), key=lambda kv: -kv[1])[:6]) + " MiB."]
    lines += ["", f"Sizes after {len(cycles) - 1} cycles: {growth:.2f}x of after the first "
              f"prune (≤ {SIZE_GROWTH:.2f}x: "
              + judge(targets, f"sizes bounded over {len(cycles) - 1} fill-and-prune cycles",
                      f"{growth:.2f}x", growth <= SIZE_GROWTH) + ")."]
    last_cycle = cycles[-1]
    if "statements" in last_cycle:
        lines += ["", "The last cycle's prune, per statement (count, total, first, last and "
                  "slowest run): " + "; ".join(
                      f"{kind} x{s['n']} {s['total_ms'] / 1000:.1f} s ({s['first_ms']:.0f}, "
                      f"{s['last_ms']:.0f}, {s['max_ms']:.0f} ms)"
                      for kind, s in sorted(last_cycle["statements"].items(),
                                            key=lambda kv: -kv[1]["total_ms"]))]
    return lines


def sqlite_table(sqlite: dict[str, Any], targets: Targets) -> list[str]:
    lines = [f"{sqlite['jobs']:,} queued jobs, {mib(sqlite['size_bytes'])} MiB file.", "",
             "| read path | before ANALYZE | after ANALYZE | target |",
             "| --- | --: | --: | --- |"]
    after = {p["name"]: p for p in sqlite["after_analyze"]}
    for p in sqlite["before_analyze"]:
        a = after[p["name"]]
        goal = "-"
        if p["name"] in TARGETS_MS:
            bound = TARGETS_MS[p["name"]]
            worst = max(p["median_ms"], a["median_ms"])
            goal = f"≤ {bound:.0f} ms: " + judge(
                targets, f"SQLite {p['name']} ≤ {bound:.0f} ms at {sqlite['jobs']:,} queued",
                f"{worst:,.0f} ms", worst <= bound)
        lines.append(f"| {p['name']} | {p['median_ms']:,.0f} ({p['queries']} q, "
                     f"{p['sql_ms']:,.0f} SQL) | {a['median_ms']:,.0f} ({a['sql_ms']:,.0f} SQL) "
                     f"| {goal} |")
    return lines


def render(results: dict[str, Any]) -> str:
    """The whole report."""
    targets: Targets = []
    out = ["# The job queue at scale", ""]
    server = results.get("server", {})
    out.append("Server: PostgreSQL " + ", ".join(f"{k} {v}" for k, v in server.items()) + ".")
    out.append("Load average (1, 5, 15 min) at the start and at each phase's end: " + "; ".join(
        f"{name} {value}" for name, value in results.get("loads", [])) + ".")
    if "history_fill" in results:
        out.append(f"HIST filled: {short(results['history_fill'])}.")
    sections = (("hot", "Hot paths, EMPTY against HIST", hot_table),
                ("reads", "Read paths", reads_table),
                ("prune", "Prune beside a drain", prune_lines),
                ("cycles", "Fill-and-prune cycles (VACUUM after each prune)", cycles_table),
                ("sqlite", "The admin on SQLite", sqlite_table))
    for key, title, table in sections:
        if key in results:
            out += ["", f"## {title}", "", *table(results[key], targets)]
    out += ["", "## Targets", "", "| target | figure | verdict |", "| --- | --: | --- |"]
    out += [f"| {what} | {figure} | {verdict(ok)} |" for what, figure, ok in targets]
    return "\n".join(out)
