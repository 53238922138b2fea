"""End to end in a real headless Chromium: log in, watch a job in flight, cancel it, see it done.

Against pytest-django's live server and a real worker on PostgreSQL (the production engine), in
the same process so the live server sees the test databases. The worker cancels the run at its
next heartbeat, through the same signal as a lost lease (rule 3), and the job's page then shows
status ``cancelled`` and an attempt with outcome ``cancelled``. On the way, every admin page is
saved as a screenshot (into $ULTJOBS_SCREENSHOTS_DIR when set: that is how docs/screenshots/ is
made; else into the test's temporary directory).

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/install-browser``). Skipped, saying
so, when /usr/bin/chromium is missing on a developer's machine; under CI=true it always runs.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry

from django_ultjobs.models import Job, JobAttempt, JobLease
from tests.admin.conftest import PASSWORD
from tests.conftest import running_worker, wait_until
from tests.testapp.jobs import block_until, flaky, record, worker_serial_block_until

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
#: Flags for a quiet, reproducible headless browser: no sandbox (containers), no GPU, no
#: background traffic or updates, and /tmp instead of a small /dev/shm.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", "--window-size=1600,900", "--force-device-scale-factor=1")
#: Quick ticks, so the cancel shows within a fraction of a second; a lease long enough that a
#: loaded machine (CI beside other suites) never loses one by being slow.
FAST = {"visibility_timeout": 10.0, "heartbeat_interval": 0.2, "threads": 4}

if not CHROMIUM.exists() and not IN_CI:
    pytest.skip(f"{CHROMIUM} is missing (run .ci/install-browser); under CI=true this test "
                "runs and fails instead", allow_module_level=True)

# Imported only once the browser is known to be there; selenium itself is a test dependency
# (pyproject's "test" extra), so a missing one is an error, not a reason to skip.
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium with a fresh profile, quit at the end."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    target = Path(os.environ.get("ULTJOBS_SCREENSHOTS_DIR") or tmp_path / "screenshots")
    target.mkdir(parents=True, exist_ok=True)
    return target


def shoot(driver: Any, folder: Path, name: str) -> None:
    """Save the whole page, not only the window, as ``<name>.png`` (Chrome DevTools)."""
    width, height = driver.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": min(height, 2400), "scale": 1}})
    (folder / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))


def open_until(driver: Any, url: str, text: str, timeout: float = 15.0) -> None:
    """Load ``url`` again until the page shows ``text`` (a changelist does not refresh itself)."""
    def shown(d: Any) -> bool:
        d.get(url)
        return text in d.find_element(By.TAG_NAME, "body").text

    WebDriverWait(driver, timeout, poll_frequency=0.2).until(shown)


def test_watch_in_flight_and_cancel_in_a_real_browser(
        pg_alias: str, live_server: Any, browser: Any, operator: Any, tmp_path: Path,
        screenshots: Path) -> None:
    base = live_server.url
    jobs = Job.objects.using(pg_alias)
    # Some history for the pages to show: a success, a failure with its traceback, hostile
    # arguments, and a concurrency=1 job that will lose its fleet slot once.
    record.enqueue(label="<script>alert('admin')</script>")
    flaky.using(max_attempts=1).enqueue(1)
    slot_release = tmp_path / "slot-release"
    capped = worker_serial_block_until.enqueue(str(slot_release))
    report = block_until.enqueue(str(tmp_path / "never"), label="nightly-report")

    with running_worker(pg_alias, **FAST):
        wait_until(lambda: jobs.get(id=report.id).status == "running", message="report running")
        wait_until(lambda: JobLease.objects.using(pg_alias).exists(), message="slot held")
        # The slot lapses under its holder (as if its worker stalled past the TTL and another
        # took it): the holder's renewal answers "no", and the run is cancelled (rule 8).
        JobLease.objects.using(pg_alias).all().delete()
        wait_until(lambda: JobAttempt.objects.using(pg_alias).filter(
            job_id=capped.id, outcome="slot_lost").exists(), message="slot lost")
        wait_until(lambda: JobLease.objects.using(pg_alias).exists(), message="slot again")
        wait_until(lambda: jobs.filter(status="failed").exists(), message="flaky failed")

        # Log in.
        browser.get(f"{base}/admin/login/?next=/admin/django_ultjobs/")
        browser.find_element(By.ID, "id_username").send_keys(operator.username)
        browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        WebDriverWait(browser, 10).until(
            lambda d: d.find_elements(By.ID, "ultjobs-summary"))
        # The pages without the navigation sidebar, so the screenshots show whole tables.
        browser.execute_script(
            "localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
        browser.refresh()
        assert "Runs in flight" in browser.find_element(By.ID, "ultjobs-summary").text
        shoot(browser, screenshots, "app-index")

        browser.get(f"{base}/admin/django_ultjobs/job/")
        shoot(browser, screenshots, "jobs")

        # Watch the long job appear in flight.
        in_flight = f"{base}/admin/django_ultjobs/inflightjob/"
        open_until(browser, in_flight, f"#{report.id}")
        shoot(browser, screenshots, "in-flight")

        browser.get(f"{base}/admin/django_ultjobs/heldslot/")
        assert "job:worker_serial_block_until" in browser.page_source
        shoot(browser, screenshots, "held-slots")

        # Cancel it through the action.
        browser.get(in_flight)
        browser.find_element(
            By.CSS_SELECTOR, f"input[name=_selected_action][value='{report.id}']").click()
        Select(browser.find_element(By.NAME, "action")).select_by_value("cancel_selected")
        browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
        WebDriverWait(browser, 10).until(
            lambda d: "Asked 1 running job to stop" in d.find_element(By.TAG_NAME, "body").text)

        # See the cancellation recorded: the worker cancels the run at its next heartbeat.
        detail = f"{base}/admin/django_ultjobs/job/{report.id}/change/"
        open_until(browser, detail, "cancelled on request")
        status = browser.find_element(By.CSS_SELECTOR, ".field-status_display .readonly").text
        outcomes = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "td.field-outcome")]
        assert (status, outcomes) == ("cancelled", ["cancelled"])
        shoot(browser, screenshots, "job-detail")

        slot_release.touch()  # let the capped job finish: the lost-slot page says what came next
        wait_until(lambda: jobs.get(id=capped.id).status == "succeeded", message="capped done")
        browser.get(f"{base}/admin/django_ultjobs/lostslotcancellation/")
        assert "job is succeeded; 1 later attempt, the next one succeeded" in browser.find_element(
            By.ID, "result_list").text
        shoot(browser, screenshots, "lost-slot-cancellations")

        browser.get(f"{base}/admin/django_ultjobs/worker/")
        assert "running" in browser.find_element(By.ID, "result_list").text
        shoot(browser, screenshots, "workers")

    job = jobs.get(id=report.id)
    assert (job.status, job.cancel_requested) == ("cancelled", True)
    assert LogEntry.objects.filter(object_id=str(report.id), user=operator).count() == 1
    assert list(JobAttempt.objects.using(pg_alias).filter(job_id=report.id)
                .values_list("outcome", flat=True)) == ["cancelled"]
