"""The peer benchmark's own arithmetic (benchmarks/peers): Celery's drain clock, read from its
worker processes' events, and the report's targets, on hand-made figures, so a change that
misreads a span or flips a verdict fails here instead of printing a wrong report."""

from __future__ import annotations

import json
import threading

import pytest

from benchmarks.peers import celery_timings, common, targets


def test_recorder_keeps_the_first_start_and_the_last_finish() -> None:
    r = celery_timings.Recorder()
    r.started(10.0)
    r.started(9.5)  # a thread that started earlier reports later
    r.finished(10.2)
    r.finished(10.1)
    assert json.loads(r.pending()) == [9.5, 10.2, 2]


def test_recorder_writes_only_what_changed() -> None:
    r = celery_timings.Recorder()
    assert r.pending() is None  # nothing ran yet
    r.started(1.0)
    r.finished(1.1)
    assert r.pending() is not None
    assert r.pending() is None
    r.started(1.2)
    r.finished(1.3)
    assert json.loads(r.pending())[2] == 2


def test_recorder_counts_every_finish_across_threads() -> None:
    r = celery_timings.Recorder()

    def run() -> None:
        for i in range(1000):
            r.started(float(i))
            r.finished(float(i) + 0.5)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert json.loads(r.pending()) == [0.0, 999.5, 8000]


def test_merge_spans_the_earliest_start_to_the_latest_finish_of_all_processes() -> None:
    values = [json.dumps([100.0, 104.0, 600]), json.dumps([100.2, 105.5, 400]).encode()]
    span = celery_timings.merge(values)
    assert span == celery_timings.Span(done=1000, start=100.0, end=105.5)
    assert span.seconds == pytest.approx(5.5)


def test_merge_of_nothing_run_is_none() -> None:
    assert celery_timings.merge([]) is None
    assert celery_timings.merge([json.dumps([None, None, 0])]) is None


def test_ideal_io_rate_is_concurrency_over_the_wait() -> None:
    assert common.ideal_io_rate(128) == pytest.approx(2560)
    assert common.ideal_io_rate(10, 0.1) == pytest.approx(100)


def figures(**over: object) -> dict:
    results = {
        "ours": {"drain": 12_000.0, "bulk": 60_000.0, "worker_cpu_us": 40.0, "db_cpu_us": 40.0,
                 "pickup": {"p50_ms": 1.5, "p99_ms": 2.5},
                 "slots": [{"threads": 32, "capped_drain": 9_500.0, "uncapped_drain": 10_000.0},
                           {"threads": 128, "capped_drain": 8_000.0,
                            "uncapped_drain": 10_000.0}],
                 "workloads": {"io-async": {"drain": 2_400.0}}},
        "pgqueuer": {"drain": 10_000.0, "bulk": 40_000.0, "worker_cpu_us": 35.0,
                     "db_cpu_us": 30.0, "pickup": {"p50_ms": 1.6, "p99_ms": 2.0},
                     "workloads": {"io-async": {"drain": 2_000.0}}},
        "procrastinate": {"workloads": {"io-async": {"drain": 2_500.0}}},
        "celery": {"drain": 2_000.0},
    }
    results.update(over)
    return results


def verdicts(results: dict) -> dict[str, bool | None]:
    return {name: met for name, _, met in targets.evaluate(results, 2560.0)}


def test_each_target_is_named_and_judged() -> None:
    v = verdicts(figures())
    assert v == {
        "drain ≥ 1.2x PgQueuer's": True,  # 1.20x
        "CPU per drained job (worker + database) ≤ PgQueuer's": False,  # 80 against 65
        "bulk enqueue ≥ 1.5x PgQueuer's": True,
        "idle pickup p50 ≤ PgQueuer's": True,
        "idle pickup p99 ≤ PgQueuer's": False,
        "fleet slots (concurrency=64) cost ≤ 10% at --threads 32": True,  # 5 %
        "fleet slots (concurrency=64) cost ≤ 10% at --threads 128": False,  # 20 %
        "drain ≥ 5x Celery's (Redis broker, acks_late)": True,  # 6x
        "async I/O drain ≥ 90% of ideal": True,  # 2,400 of 2,560
        "async I/O drain ahead of PgQueuer's": True,
        "async I/O drain ahead of Procrastinate's": False,
    }


def test_a_target_without_its_figures_is_not_measured_rather_than_missed() -> None:
    results = figures(celery={}, pgqueuer={})
    results["ours"]["slots"] = [results["ours"]["slots"][0]]
    rows = {name: (figure, met) for name, figure, met in targets.evaluate(results, 2560.0)}
    assert rows["drain ≥ 5x Celery's (Redis broker, acks_late)"] == ("not measured", None)
    assert rows["drain ≥ 1.2x PgQueuer's"] == ("not measured", None)
    assert rows["fleet slots (concurrency=64) cost ≤ 10% at --threads 128"] == (
        "not measured", None)
    assert "| - |" in targets.render(targets.evaluate(results, 2560.0))


def test_the_targets_table_says_met_and_missed() -> None:
    table = targets.render([("a", "1x", True), ("b", "2x", False)])
    assert "| a | 1x | met |" in table
    assert "| b | 2x | **missed** |" in table


def test_a_run_of_one_workload_renders_without_the_no_op_figures() -> None:
    """``--workloads io-async --systems ours,pgqueuer``: no drain table, no chart data, and the
    targets it did not measure say so."""
    import argparse

    from benchmarks.peers.__main__ import render

    args = argparse.Namespace(workloads=["io-async"], io_concurrency=128, io_jobs=10_000,
                              repeat=1, default_flags_jobs=20_000)
    results = {
        "ours": {"async_lane": False, "workloads": {"io-async": {
            "runs": [2_400.0], "drain": 2_400.0, "jobs": 10_000,
            "setting": "--threads 128 (async lane not available)"}}},
        "pgqueuer": {"workloads": {"io-async": {
            "runs": [2_000.0], "drain": 2_000.0, "jobs": 10_000,
            "setting": "max_concurrent_tasks 128, batch_size 64"}}},
    }
    env = {"date": "today", "server_version": "15", "cores": 2, "cpu": "x", "python": "3.12",
           "synchronous_commit": "on", "fsync": "on", "shared_buffers": "128MB",
           "autovacuum": "off", "git": "abc", "load": 0.1}
    report = render(results, {}, env, args)
    assert "| django_ultjobs | io-async | --threads 128 (async lane not available) | 2,400 | " \
           "94 % |" in report
    assert "| async I/O drain ahead of PgQueuer's | 1.20x | met |" in report
    assert "| drain ≥ 1.2x PgQueuer's | not measured | - |" in report
    assert "No-op jobs" not in report


def test_pooled_pickup_reads_percentiles_over_every_block_and_keeps_each_blocks_p99() -> None:
    """Five blocks of 200 read as one figure of 1,000: the p99 of all the samples (the 990th),
    not the median of the blocks' p99s. Twelve slow samples in one block make the 990th slow."""
    blocks = []
    for b in range(5):
        latencies = [1.0] * 188 + [9.0] * 12 if b == 0 else [1.0] * 199 + [2.0]
        blocks.append({"lost": b % 2, "latencies_ms": latencies,
                       **common.percentiles(latencies)})
    pooled = common.pooled_pickup(blocks)
    assert pooled["samples"] == 1000
    assert pooled["lost"] == 2
    assert pooled["p50_ms"] == 1.0
    assert pooled["p99_ms"] == 9.0
    assert pooled["block_p99_ms"] == [9.0, 1.0, 1.0, 1.0, 1.0]
    assert "latencies_ms" not in pooled


def test_pickups_of_ours_and_pgqueuer_alternate_in_blocks_and_the_others_take_one() -> None:
    import argparse

    from benchmarks.peers.__main__ import single_and_pickup

    calls: list[tuple[str, str, tuple[str, ...]]] = []

    class Runner:
        args = argparse.Namespace(pickup_samples=1000, pickup_blocks=5, peer_pickup_samples=200,
                                  dtdb_interval=0.1, dtdb_default_interval_samples=0)

        def phase(self, system: str, phase: str, *extra: str) -> dict[str, object]:
            calls.append((system, phase, extra))
            if phase == "single":
                return {"single_commit_ms": 0.5}
            return {"lost": 0, "latencies_ms": [1.0], **common.percentiles([1.0])}

    results: dict[str, dict[str, object]] = {"ours": {"threads": 128}, "pgqueuer": {},
                                              "procrastinate": {}}
    single_and_pickup(Runner(), ["ours", "pgqueuer", "procrastinate"], results)  # type: ignore[arg-type]
    pickups = [(system, extra[1]) for system, phase, extra in calls if phase == "pickup"]
    assert pickups == [("ours", "200"), ("pgqueuer", "200"), ("procrastinate", "200"),
                       ("pgqueuer", "200"), ("ours", "200"), ("ours", "200"), ("pgqueuer", "200"),
                       ("pgqueuer", "200"), ("ours", "200"), ("ours", "200"), ("pgqueuer", "200")]
    assert results["ours"]["pickup"]["blocks"] == 5  # type: ignore[index]
    assert results["procrastinate"]["pickup"]["blocks"] == 1  # type: ignore[index]
