"""The process pool's scenarios (``runjobworker --pool process``, rules 140 (hard-stop) to
143 (children-die-with-parent)): the usual workload (a third of it capped at two runs
fleet-wide) on workers whose bodies run in child processes, while

* ``child-kill``: children are SIGKILLed under their bodies (as the OOM killer would);
* ``parent-stop``: a worker is SIGSTOPped past the visibility timeout, then let go on: its
  children must end their bodies before their leases and slots lapse
  (rule 141 (cap-without-cooperation)), so the cap holds with the worker frozen;
* ``parent-kill``: workers are SIGKILLed: their children must end with them.

A child's pid is what its bodies wrote in the runs files, so a child the scenario killed, or saw
end, is a fault like a killed worker: its run may run again."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

from benchmarks.chaos.faults import run_workload
from benchmarks.chaos.harness import VISIBILITY_TIMEOUT, Harness, WorkerProcess
from benchmarks.chaos.measure import Faults, ScenarioResult

#: Children per worker.
PROCESSES = 3
POOL = ("--pool", "process", "--processes", str(PROCESSES), "--cancel-wait", "0.5")


def children_of(pid: int) -> set[int]:
    """The pids whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def pool_children(worker: WorkerProcess) -> set[int]:
    """A worker's children: those of its fork server, its one child process."""
    return {pid for server in children_of(worker.pid) for pid in children_of(server)
            if alive(pid)}


def _watch_ends(pids: set[int], faults: Faults, until: float) -> set[int]:
    """Note in ``faults`` when each of ``pids`` ends (10 ms apart) until ``until``; the pids
    still alive then."""
    left = set(pids)
    while left and time.time() < until:
        for pid in [p for p in left if not alive(p)]:
            faults.killed[pid] = time.time()
            left.discard(pid)
        time.sleep(0.01)
    return left


def child_kill(h: Harness, rng: random.Random) -> ScenarioResult:
    """SIGKILL a random child of a random worker every half second or so."""
    kills = 6 if h.short else 20

    def fault(h: Harness, fleet: list[WorkerProcess], faults: Faults,
              rng: random.Random) -> None:
        done = 0
        while done < kills:
            time.sleep(rng.uniform(0.3, 0.7))
            victims = sorted(pool_children(rng.choice(fleet)))
            if not victims:
                continue
            victim = rng.choice(victims)
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                continue
            faults.killed[victim] = time.time()
            done += 1

    return run_workload(h, "child-kill", fault, rng, jobs=150 if h.short else 600,
                        seconds=0.15, workers=2, flags=POOL)


def parent_stop(h: Harness, rng: random.Random) -> ScenarioResult:
    """SIGSTOP a worker for twice the visibility timeout, then SIGCONT it, a few times."""
    stops = 2 if h.short else 5

    def fault(h: Harness, fleet: list[WorkerProcess], faults: Faults,
              rng: random.Random) -> None:
        for _ in range(stops):
            time.sleep(rng.uniform(0.6, 1.2))
            worker = rng.choice(fleet)
            children = pool_children(worker)
            start = time.time()
            os.kill(worker.pid, signal.SIGSTOP)
            try:
                # Busy children end by their guard before their leases lapse; idle ones wait.
                _watch_ends(children, faults, start + 2 * VISIBILITY_TIMEOUT)
            finally:
                os.kill(worker.pid, signal.SIGCONT)
            # A body that returned while its worker was frozen may run again (its settle
            # waited): the window excuses it, as a database outage's does.
            faults.windows.append((start, time.time()))

    return run_workload(h, "parent-stop", fault, rng, jobs=150 if h.short else 600,
                        seconds=0.15, workers=3, flags=POOL)


def parent_kill(h: Harness, rng: random.Random) -> ScenarioResult:
    """SIGKILL a random worker every second or so and start a replacement; every child of the
    killed worker must end within a second."""
    kills = 3 if h.short else 10
    orphans: list[int] = []

    def fault(h: Harness, fleet: list[WorkerProcess], faults: Faults,
              rng: random.Random) -> None:
        live = list(fleet)
        for _ in range(kills):
            time.sleep(rng.uniform(0.8, 1.4))
            victim = live.pop(rng.randrange(len(live)))
            servers = children_of(victim.pid)
            children = pool_children(victim)
            faults.killed[victim.pid] = h.kill(victim)
            orphans.extend(_watch_ends(children | servers, faults, time.time() + 1.0))
            live.append(h.start_worker(*POOL))

    result = run_workload(h, "parent-kill", fault, rng, jobs=150 if h.short else 600,
                          seconds=0.15, workers=3, flags=POOL)
    result.notes.append(f"orphans {len(orphans)}")
    result.fail_if(bool(orphans), f"processes outlived their worker by 1 s: {orphans}")
    return result
