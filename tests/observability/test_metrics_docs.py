"""The console exporter snippet of docs/operations.md, as written, in a fresh interpreter: a
burst worker's figures come out on stdout as it exits (rule 70 (no-sdk-no-metrics): nothing without
an SDK, so the snippet is all a project adds)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def console_snippet() -> str:
    text = (REPO / "docs" / "operations.md").read_text()
    section = text.split("#### A first look: the console exporter", 1)[1].split("####", 1)[0]
    (snippet,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    return snippet


SCRIPT = """
import django
django.setup()
from django.core.management import call_command
call_command("migrate", database="default", verbosity=0)

{snippet}
from tests.testapp.jobs import add
add.bulk_enqueue([(1, 2), (3, 4)])
call_command("runjobworker", database="default", burst=True, threads=2)
"""


def test_the_documented_console_exporter_prints_a_burst_workers_figures(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ULTJOBS_")) and k != "DJANGO_SETTINGS_MODULE"}
    env.update({"DJANGO_SETTINGS_MODULE": "tests.settings", "ULTJOBS_TEST_TMP": str(tmp_path),
                "PYTHONPATH": str(REPO)})
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(snippet=console_snippet())],
                          cwd=REPO, env=env, timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for name in ("ultjobs.jobs.finished", "ultjobs.job.duration", "ultjobs.job.wait"):
        assert f'"name": "{name}"' in done.stdout, done.stdout[-3000:]
    assert re.search(r'"job.name": "add",\s+"queue": "default",\s+"outcome": "succeeded"',
                     done.stdout), done.stdout[-3000:]
