"""The peer benchmark beyond the no-op drain: Celery's pools, I/O-bound and Django-shaped jobs,
and ours at its default flags.

``measure_*`` run the phases (through ``__main__``'s runner) and store their figures in the
results; ``render_*`` turn the stored figures into the report's lines. Every figure is a median of
the drains of one run, interleaved system by system like the no-op drains.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from benchmarks.peers import common

#: The systems each workload runs on (Celery has no async bodies; the Django-shaped job is for
#: the Django-based systems and Celery configured with Django).
WORKLOAD_SYSTEMS = {
    "io-sync": ("ours", "pgqueuer", "procrastinate", "celery"),
    "io-async": ("ours", "pgqueuer", "procrastinate"),
    "django": ("ours", "django-tasks-db", "celery"),
}
LABELS = {"ours": "django_ultjobs", "pgqueuer": "PgQueuer", "procrastinate": "Procrastinate",
          "django-tasks-db": "django-tasks-db", "celery": "Celery (Redis)"}
ASYNC_LANE_MISSING = "async lane not available"


class Runner(Protocol):
    args: Any

    def phase(self, system: str, phase: str, *extra: str) -> dict[str, Any]: ...

    def jobs(self, system: str) -> int: ...


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


# -- Celery's pools ------------------------------------------------------------------------------


def celery_settings(args: Any) -> list[tuple[str, int]]:
    """The (pool, concurrency) pairs the sweep tries."""
    return ([("prefork", int(c)) for c in args.celery_prefork.split(",") if c] +
            [("threads", int(c)) for c in args.celery_threads.split(",") if c])


def process_pool_args(processes: int) -> tuple[str, ...]:
    """Ours' process pool: ``processes`` children, one body at a time each."""
    return ("--pool", "process", "--processes", str(processes))


def celery_pool_args(pool: str, concurrency: int) -> tuple[str, ...]:
    return ("--pool", pool, "--concurrency", str(concurrency))


def sweep_celery(runner: Runner, drain: Any, celery: dict[str, Any]) -> None:
    """One drain per pool setting; each pool's best goes on to the measured rounds."""
    celery["sweep"] = {}
    for pool, concurrency in celery_settings(runner.args):
        run = drain("celery", f"--pool {pool} -c {concurrency} (sweep)",
                    *celery_pool_args(pool, concurrency))
        celery["sweep"][f"{pool} {concurrency}"] = run["jobs_per_s"]
    best: dict[str, tuple[int, float]] = {}
    for key, rate in celery["sweep"].items():
        pool, concurrency = key.split()
        if pool not in best or rate > best[pool][1]:
            best[pool] = (int(concurrency), rate)
    celery["pools"] = {pool: {"concurrency": c, "drain_runs": [], "bulk_runs": [],
                              "seconds_runs": []} for pool, (c, _) in best.items()}


def settle_celery(celery: dict[str, Any]) -> None:
    """Each pool's medians; the system's row is its better pool."""
    for figures in celery["pools"].values():
        figures["drain"] = common.median(figures["drain_runs"])
    pool = max(celery["pools"], key=lambda p: celery["pools"][p]["drain"])
    best = celery["pools"][pool]
    celery["pool"], celery["concurrency"] = pool, best["concurrency"]
    celery["drain_runs"], celery["seconds_runs"] = best["drain_runs"], best["seconds_runs"]
    celery["cpu_runs"] = best.get("cpu_runs", [])
    celery["setting"] = (f"--pool {pool} -c {best['concurrency']}, acks_late, prefetch "
                         f"{celery.get('prefetch', 4)}")


def render_celery(celery: dict[str, Any]) -> str:
    pools = "; ".join(
        f"{pool} at -c {f['concurrency']}: " + ", ".join(fmt(v) for v in f["drain_runs"])
        + f" (median {fmt(f['drain'])})" for pool, f in celery["pools"].items())
    return ("Celery in detail: sweep (one drain each) "
            + ", ".join(f"{k}: {fmt(v)}/s" for k, v in celery["sweep"].items())
            + f"; the measured rounds, each pool at its best: {pools} jobs/s. Timed from the "
            "worker's own task_prerun/task_postrun (first start → last finish); the database "
            "column of the CPU table is Redis's side there. Broker: "
            + celery.get("broker", "?")
            + (" (a private redis-server: the shared one was down)"
               if celery.get("private_redis") else "") + ".")


# -- I/O-bound and Django-shaped workloads -------------------------------------------------------


def workload_args(system: str, workload: str, args: Any, results: dict[str, Any]
                  ) -> tuple[tuple[str, ...], str]:
    """The drain's extra flags for ``system`` on ``workload``, and the setting as reported."""
    c = args.io_concurrency
    n = args.django_processes
    if workload == "django":
        if system == "ours" and n:
            return (*process_pool_args(n),), f"--pool process --processes {n}"
        if system == "ours":
            return ("--threads", str(args.django_threads)), f"--threads {args.django_threads}"
        if system == "celery":
            concurrency = n or results["celery"].get("pools", {}).get("prefork", {}).get(
                "concurrency", 4)
            return (celery_pool_args("prefork", concurrency),
                    f"--pool prefork -c {concurrency}")
        return (), "one task at a time, psycopg pool"
    if system == "ours":
        if workload == "io-async" and results["ours"].get("async_lane"):
            return ("--async-concurrency", str(c)), f"--async-concurrency {c}"
        lane = f" ({ASYNC_LANE_MISSING}: each body in asyncio.run on a thread)" \
            if workload == "io-async" else ""
        return ("--threads", str(c)), f"--threads {c}{lane}"
    if system == "celery":
        return celery_pool_args("threads", c), f"--pool threads -c {c}"
    if system == "pgqueuer":
        return ("--concurrency", str(c)), f"max_concurrent_tasks {c}, batch_size {c // 2}"
    return ("--concurrency", str(c)), f"concurrency {c}"


def workload_jobs(system: str, workload: str, args: Any) -> int:
    if workload == "django":
        return args.dtdb_jobs if system == "django-tasks-db" else args.django_jobs
    return args.io_jobs


def measure_workloads(runner: Runner, systems: list[str], results: dict[str, Any],
                      drain: Any) -> None:
    """The I/O-bound and Django-shaped drains, interleaved round by round."""
    args = runner.args
    workloads = [w for w in args.workloads if w in WORKLOAD_SYSTEMS]
    for r in range(args.repeat):
        for workload in workloads:
            for system in [s for s in WORKLOAD_SYSTEMS[workload] if s in systems]:
                extra, setting = workload_args(system, workload, args, results)
                jobs = workload_jobs(system, workload, args)
                run = drain(system, f"{workload} round {r + 1}/{args.repeat}",
                            "--workload", workload, "--jobs", str(jobs), *extra)
                figures = results[system].setdefault("workloads", {}).setdefault(
                    workload, {"runs": [], "setting": setting, "jobs": jobs})
                figures["runs"].append(run["jobs_per_s"])
                figures["drain"] = common.median(figures["runs"])
                if workload == "django" and system == "ours" and args.django_processes:
                    measure_process_noop(runner, results, drain, r)


def measure_process_noop(runner: Runner, results: dict[str, Any], drain: Any, r: int) -> None:
    """Ours' process pool on the no-op drain, once per round of the Django-shaped drains:
    what the hand-over to a child costs a job that does nothing."""
    args = runner.args
    jobs = 2 * args.django_jobs
    run = drain("ours", f"no-op, process pool, round {r + 1}/{args.repeat}",
                "--workload", "noop", "--jobs", str(jobs),
                *process_pool_args(args.django_processes))
    figures = results["ours"].setdefault("workloads", {}).setdefault(
        "noop-process", {"runs": [], "jobs": jobs,
                         "setting": f"--pool process --processes {args.django_processes}"})
    figures["runs"].append(run["jobs_per_s"])
    figures["drain"] = common.median(figures["runs"])


def measure_default_flags(runner: Runner, results: dict[str, Any], drain: Any, r: int) -> None:
    """Ours started with no options at all, once per round of the no-op drains."""
    args = runner.args
    run = drain("ours", f"default flags, round {r + 1}/{args.repeat}", "--default-flags",
                "--jobs", str(args.default_flags_jobs))
    ours = results["ours"]
    ours.setdefault("default_runs", []).append(run["jobs_per_s"])
    ours["default_drain"] = common.median(ours["default_runs"])


def render_workloads(results: dict[str, Any], args: Any) -> list[str]:
    out: list[str] = []
    io = [w for w in ("io-sync", "io-async") if w in args.workloads]
    if io:
        c = args.io_concurrency
        ideal = common.ideal_io_rate(c)
        out += ["", f"I/O-bound jobs: {args.io_jobs:,} jobs that each wait "
                f"{common.IO_SECONDS * 1000:.0f} ms (`time.sleep` in a sync body, "
                "`await asyncio.sleep` in an async one), every system at concurrency "
                f"{c}: ideal {c} ÷ {common.IO_SECONDS * 1000:.0f} ms = {fmt(ideal)} jobs/s. "
                f"Medians of {args.repeat}.", "",
                "| system | workload | setting | jobs/s | % of ideal |", "|---|---|---|--:|--:|"]
        for workload in io:
            for system in WORKLOAD_SYSTEMS[workload]:
                f = results.get(system, {}).get("workloads", {}).get(workload)
                if f:
                    out.append(f"| {LABELS[system]} | {workload} | {f['setting']} | "
                               f"{fmt(f['drain'])} | {f['drain'] / ideal * 100:.0f} % |")
    if "django" in args.workloads:
        ours = results.get("ours", {}).get("workloads", {}).get("django")
        out += ["", "Django-shaped jobs: each one ORM insert and one ORM read of a small model "
                "(its own table in each system's database); connections kept between jobs "
                "(CONN_MAX_AGE 60; django-tasks-db its pool). Medians of "
                f"{args.repeat}.", "",
                "| system | setting | drained N | jobs/s | ours ÷ it |", "|---|---|--:|--:|--:|"]
        for system in WORKLOAD_SYSTEMS["django"]:
            f = results.get(system, {}).get("workloads", {}).get("django")
            if f:
                x = f"{ours['drain'] / f['drain']:.2f}x" if ours and system != "ours" else "-"
                out.append(f"| {LABELS[system]} | {f['setting']} | {f['jobs']:,} | "
                           f"{fmt(f['drain'])} | {x} |")
        noop = results.get("ours", {}).get("workloads", {}).get("noop-process")
        if noop:
            out += ["", f"- Ours' process pool on no-op jobs ({noop['setting']}, "
                    f"{noop['jobs']:,} jobs): {fmt(noop['drain'])} jobs/s (runs "
                    + ", ".join(fmt(v) for v in noop["runs"]) + ")."]
    return out


def render_default_flags(ours: dict[str, Any], jobs: int) -> str | None:
    if "default_drain" not in ours:
        return None
    return (f"- The default matters: `runjobworker` with no options drains "
            f"{fmt(ours['default_drain'])} no-op jobs/s ({jobs:,} jobs; "
            + ", ".join(fmt(v) for v in ours["default_runs"])
            + f"), against {fmt(ours['drain'])} at `--threads {ours['threads']}` "
            f"({ours['default_drain'] / ours['drain']:.2f}x).")
