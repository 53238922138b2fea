"""End to end in a real headless Chromium: log in, watch a job in flight, cancel it, see it done.

Against pytest-django's live server and a real worker on PostgreSQL (the production engine), in
the same process so the live server sees the test databases. The worker cancels the run at its
next heartbeat, through the same signal as a lost lease (rule 3 (lost-lease-cancels)), and the job's
page then shows status ``cancelled`` and an attempt with outcome ``cancelled``. On the way, every
admin page is saved as a screenshot (into $ULTJOBS_SCREENSHOTS_DIR when set: that is how
docs/screenshots/ is made; else into the test's temporary directory).

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/install-browser``). Skipped, saying
so, when /usr/bin/chromium is missing on a developer's machine; under CI=true it always runs.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission

from django_ultjobs.models import Job, JobAttempt, JobSchedule, Slot
from django_ultjobs.store import get_store
from tests.admin.conftest import PASSWORD
from tests.conftest import running_worker, wait_until
from tests.testapp.jobs import block_until, flaky, record, worker_serial_block_until

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
#: Flags for a quiet, reproducible headless browser: no sandbox (containers), no GPU, no
#: background traffic or updates, and /tmp instead of a small /dev/shm.
#: 1440 px wide, with the navigation sidebar open (Django's default): a laptop's admin.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", "--window-size=1440,900", "--force-device-scale-factor=1")
#: Quick beats, so the cancel shows within a fraction of a second; a lease long enough that a
#: loaded machine (CI beside other suites) never loses one by being slow.
FAST = {"visibility_timeout": 10.0, "heartbeat_interval": 0.2, "threads": 4}

if not CHROMIUM.exists() and not IN_CI:
    pytest.skip(f"{CHROMIUM} is missing (run .ci/install-browser); under CI=true this test "
                "runs and fails instead", allow_module_level=True)

# Imported only once the browser is known to be there; selenium itself is a test dependency
# (pyproject's "test" extra), so a missing one is an error, not a reason to skip.
from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
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


def body_text(driver: Any) -> str:
    return driver.find_element(By.TAG_NAME, "body").text


def assert_column_visible(driver: Any, cell_css: str) -> None:
    """Fail if a list's cells in ``cell_css`` are cut off or pushed out of sight.

    Neither the page nor the list's own scrolling box (Django's ``.results``, which scrolls
    sideways and hides what does not fit) may be wider than it shows, and each cell must end
    inside that box and fit its text (a clipped ``runnin`` is wider than its cell).
    """
    page_width, window_width = driver.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth]")
    assert page_width <= window_width, (driver.current_url, page_width, window_width)
    box_scroll, box_client, box_right = driver.execute_script(
        "const b = document.querySelector('#changelist-form .results');"
        "return [b.scrollWidth, b.clientWidth, b.getBoundingClientRect().right]")
    assert box_scroll <= box_client, (driver.current_url, box_scroll, box_client)
    cells = driver.find_elements(By.CSS_SELECTOR, cell_css)
    assert cells, cell_css
    for cell in cells:
        right, scroll, client = driver.execute_script(
            "const r = arguments[0].getBoundingClientRect();"
            "return [r.right, arguments[0].scrollWidth, arguments[0].clientWidth]", cell)
        assert right <= box_right + 0.5 and scroll <= client, (
            cell_css, cell.text, right, box_right, scroll, client)


#: Characters after which a line may break inside a cell: a space, a hyphen, and the separators
#: ``display.breakable`` marks with ``<wbr>``. A line that starts after any other character
#: broke a word in two ("heart/beat_/tick").
BREAKS_AFTER = r"[\s_.:@/,\-]"
#: Every line break inside ``arguments[0]``, as the characters either side of it.
LINE_BREAKS_JS = r"""
const chars = [];  // [character, top, height] of each painted character; a space as " "
const walker = document.createTreeWalker(arguments[0], NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.data.length; i++) {
        if (/\s/.test(node.data[i])) {  // a space a line ends on is not painted: kept as one
            if (chars.length && chars[chars.length - 1][0] !== " ") chars.push([" ", 0, 0]);
            continue;
        }
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const rect = range.getClientRects()[0];
        if (rect && rect.width > 0) chars.push([node.data[i], rect.top, rect.height]);
    }
}
const painted = chars.filter(c => c[0] !== " ");
const text = chars.map(c => c[0]).join("");
const breaks = [];
let at = 0;  // where painted[k] is in text
for (let k = 0; k < painted.length; k++) {
    at = text.indexOf(painted[k][0], at);
    if (k > 0 && painted[k][1] >= painted[k - 1][1] + painted[k - 1][2] / 2) {
        breaks.push([text.slice(0, at), painted[k][0]]);
    }
    at += 1;
}
return breaks;
"""
#: The admin's lists, each with rows once the browser test has run its jobs.
LISTS = ("job", "inflightjob", "heldslot", "lostslotcancellation", "worker", "jobschedule")


def assert_no_word_broken(driver: Any) -> None:
    """Fail if a cell or header of the list on screen wraps inside a word, or is cut off."""
    cells = driver.find_elements(By.CSS_SELECTOR, "#result_list td, #result_list thead th, "
                                                  "#changelist-filter li")
    for cell in cells:
        for before, after in driver.execute_script(LINE_BREAKS_JS, cell):
            assert re.search(BREAKS_AFTER + "$", before) or re.match(r"\s", after), (
                driver.current_url, driver.execute_script("return window.innerWidth"),
                f"{before}|{after}", cell.text)
    assert_column_visible(driver, "#result_list td")


def assert_lists_whole_at(driver: Any, base: str, widths: tuple[int, ...],
                          folder: Path) -> None:
    """Every list, at each window width: nothing broken mid-word, nothing clipped."""
    try:
        for width in widths:
            driver.set_window_size(width, 900)
            assert driver.execute_script("return window.innerWidth") == width
            for name in LISTS:
                driver.get(f"{base}/admin/django_ultjobs/{name}/")
                shoot(driver, folder, f"{name}-{width}")  # first: it shows what failed
                assert_no_word_broken(driver)
    finally:
        driver.set_window_size(1440, 900)


def top_of(driver: Any, css: str) -> float:
    """The distance from the top of the page to the first element matching ``css``."""
    return driver.execute_script(
        "return arguments[0].getBoundingClientRect().top + window.scrollY",
        driver.find_element(By.CSS_SELECTOR, css))


def test_watch_in_flight_and_cancel_in_a_real_browser(
        pg_alias: str, live_server: Any, browser: Any, operator: Any, tmp_path: Path,
        screenshots: Path) -> None:
    base = live_server.url
    jobs = Job.objects.using(pg_alias)
    # Some history for the pages to show: a success, a failure with its traceback, hostile
    # arguments, and a concurrency=1 job that will lose its fleet slot once, with a second run
    # of its kind waiting for that slot.
    done = record.enqueue(label="<script>alert('admin')</script>")
    failed = flaky.using(max_attempts=1).enqueue(1)
    slot_release = tmp_path / "slot-release"
    capped = worker_serial_block_until.enqueue(str(slot_release))
    report = block_until.enqueue(str(tmp_path / "never"), label="nightly-report")

    with running_worker(pg_alias, **FAST):
        wait_until(lambda: jobs.get(id=report.id).status == "running", message="report running")
        wait_until(lambda: Slot.objects.using(pg_alias).exists(), message="slot held")
        # The slot lapses under its holder (as if its worker stalled past the TTL and another
        # took it): the holder's renewal answers "no", and the run is cancelled
        # (rule 8 (lost-slot-cancels)).
        Slot.objects.using(pg_alias).all().delete()
        wait_until(lambda: JobAttempt.objects.using(pg_alias).filter(
            job_id=capped.id, outcome="slot_lost").exists(), message="slot lost")
        wait_until(lambda: Slot.objects.using(pg_alias).exists(), message="slot again")
        wait_until(lambda: jobs.filter(status="failed").exists(), message="flaky failed")
        wait_until(lambda: jobs.get(id=done.id).status == "succeeded", message="record done")
        capped_waiting = worker_serial_block_until.enqueue(str(slot_release))
        # A real site's enqueuer is longer than "pytest" (the column must still fit).
        jobs.filter(id=report.id).update(enqueued_by="user:night-operator@shop.example.com")

        # Log in.
        browser.get(f"{base}/admin/login/?next=/admin/django_ultjobs/")
        browser.find_element(By.ID, "id_username").send_keys(operator.username)
        browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        WebDriverWait(browser, 10).until(
            lambda d: d.find_elements(By.ID, "ultjobs-summary"))
        assert "Runs in flight" in browser.find_element(By.ID, "ultjobs-summary").text
        # Read-only pages are linked as "View", never "Change", even for an operator.
        links = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#content-main td a")]
        assert "View" in links and "Change" not in links, links
        open_until(browser, f"{base}/admin/django_ultjobs/", "waiting for a fleet slot")
        shoot(browser, screenshots, "app-index")

        browser.get(f"{base}/admin/django_ultjobs/job/")
        assert browser.find_element(By.TAG_NAME, "h1").text == "Select job to view"
        shoot(browser, screenshots, "jobs")

        # Watch the long job appear in flight; at 1440 px with the sidebar open, every column
        # (the last is "enqueued by") is in the window.
        in_flight = f"{base}/admin/django_ultjobs/inflightjob/"
        open_until(browser, in_flight, f"#{report.id}")
        assert_column_visible(browser, "#result_list th.column-enqueued_by_display")
        assert_column_visible(browser, "#result_list td.field-enqueued_by_display")
        shoot(browser, screenshots, "in-flight")

        browser.get(f"{base}/admin/django_ultjobs/heldslot/")
        assert browser.find_element(By.TAG_NAME, "h1").text == "Held slots"
        assert "job:worker_serial_block_until" in browser.page_source.replace("<wbr>", "")
        # Its cap, and the second run of its kind waiting for the one slot.
        assert [browser.find_element(By.CSS_SELECTOR, f"#result_list td.field-{c}").text
                for c in ("cap", "runs_waiting")] == ["1", "1"]
        assert "to change" not in browser.title
        shoot(browser, screenshots, "held-slots")

        operator.user_permissions.add(Permission.objects.get(codename="view_jobschedule"))
        # A running job's page: its outcome is its lease, said to be one, and its attempts
        # table shows the run in progress.
        browser.get(f"{base}/admin/django_ultjobs/job/{report.id}/change/")
        outcome = browser.find_element(By.CSS_SELECTOR, ".field-outcome .readonly").text
        assert outcome.startswith("running; its worker renews the lease") and \
            outcome.endswith("unless renewed"), outcome
        assert [e.text for e in browser.find_elements(
            By.CSS_SELECTOR, "td.field-outcome_display")] == ["running"]
        shoot(browser, screenshots, "job-running")

        # A schedule that never ticked (its cursor is when it began, 9 minutes ago).
        JobSchedule.objects.using(pg_alias).create(
            name="reports.heartbeat_tick", schedule="every 60 s",
            last_tick=get_store(pg_alias).db_now() - timedelta(minutes=9))
        # Every list, with rows in each, at a laptop's 1280 px and at 1440, the navigation
        # sidebar and the filters open.
        widths = Path(os.environ.get("ULTJOBS_WIDTHS_DIR") or tmp_path / "widths")
        widths.mkdir(parents=True, exist_ok=True)
        assert_lists_whole_at(browser, base, (1280, 1440), widths)

        # Cancel it through the action, with a finished job selected too: the message says
        # what was skipped and why.
        browser.get(f"{base}/admin/django_ultjobs/job/")
        for job_id in (report.id, done.id):
            browser.find_element(
                By.CSS_SELECTOR, f"input[name=_selected_action][value='{job_id}']").click()
        Select(browser.find_element(By.NAME, "action")).select_by_value("cancel_selected")
        browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
        # The action asks why first (rule 59 (cancel-reason-kept)); the answer cancels.
        WebDriverWait(browser, 10, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda d: d.find_elements(By.NAME, "reason"))
        assert "2 selected jobs will be cancelled" in body_text(browser)
        shoot(browser, screenshots, "cancel-reason")
        browser.find_element(By.NAME, "reason").send_keys("the report is no longer needed")
        browser.find_element(By.CSS_SELECTOR, "#ultjobs-cancel-reason input[type=submit]").click()
        # The old page's body goes stale when the action's answer replaces it: look again.
        WebDriverWait(browser, 10, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda d: "Asked 1 running job to stop" in body_text(d))
        assert "Skipped 1 job (1 already succeeded)" in body_text(browser)

        # See the cancellation recorded: the worker cancels the run at its next heartbeat.
        detail = f"{base}/admin/django_ultjobs/job/{report.id}/change/"
        open_until(browser, detail, "cancelled on request: the report is no longer needed")
        assert browser.find_element(By.TAG_NAME, "h1").text == "View job"
        status = browser.find_element(By.CSS_SELECTOR, ".field-status_display .readonly").text
        outcomes = [e.text for e in browser.find_elements(By.CSS_SELECTOR,
                                                        "td.field-outcome_display")]
        assert (status, outcomes) == ("cancelled", ["cancelled"])
        # No lease clock on a finished job: "visible at ... (in 17 s)" would promise a run.
        assert "visible at" not in body_text(browser).lower()

        # A failed job: its state, outcome and exception line come first, above the attempts
        # and the call; the traceback opens on a click.
        browser.get(f"{base}/admin/django_ultjobs/job/{failed.id}/change/")
        error = browser.find_element(By.CSS_SELECTOR, ".field-last_error_display")
        assert error.find_element(By.CSS_SELECTOR, ".ultjobs-exception").text == \
            "RuntimeError: flaky failure on attempt 1"
        traceback = error.find_element(By.CSS_SELECTOR, "details .ultjobs-pre")
        assert not traceback.is_displayed()
        cell = browser.find_element(By.CSS_SELECTOR, "td.field-error_display")
        assert cell.find_element(By.CSS_SELECTOR, ".ultjobs-exception").text == \
            "RuntimeError: flaky failure on attempt 1"
        assert top_of(browser, ".field-status_display") < top_of(browser, ".field-outcome") \
            < top_of(browser, ".field-last_error_display") < top_of(browser, ".inline-group") \
            < top_of(browser, ".field-args_display")
        assert top_of(browser, ".field-last_error_display") < 600  # in the first screen
        error.find_element(By.CSS_SELECTOR, "summary").click()
        assert traceback.is_displayed() and "Traceback" in traceback.text
        error.find_element(By.CSS_SELECTOR, "summary").click()
        shoot(browser, screenshots, "job-detail")

        slot_release.touch()  # let the capped jobs finish: the lost-slot page says what came next
        wait_until(lambda: jobs.get(id=capped.id).status == "succeeded", message="capped done")
        wait_until(lambda: jobs.get(id=capped_waiting.id).status == "succeeded",
                   message="the second capped job done")
        browser.get(f"{base}/admin/django_ultjobs/lostslotcancellation/")
        assert "job is succeeded; 1 later attempt, the next one succeeded" in browser.find_element(
            By.ID, "result_list").text
        assert browser.find_element(By.TAG_NAME, "h1").text == "Lost-slot cancellations"
        shoot(browser, screenshots, "lost-slot-cancellations")

        browser.get(f"{base}/admin/django_ultjobs/worker/")
        assert "running" in browser.find_element(By.ID, "result_list").text
        assert_column_visible(browser, "#result_list td.field-state")
        shoot(browser, screenshots, "workers")


    job = jobs.get(id=report.id)
    assert (job.status, job.cancel_requested) == ("cancelled", True)
    assert LogEntry.objects.filter(object_id=str(report.id), user=operator).count() == 1
    assert list(JobAttempt.objects.using(pg_alias).filter(job_id=report.id)
                .values_list("outcome", flat=True)) == ["cancelled"]


def _history(alias: str) -> None:
    """An hour of runs with a shape an operator would recognise: steady successes, a burst of
    failures twenty minutes ago, a slow nightly report, and three queues with work waiting."""
    import random
    from datetime import timedelta

    from django_ultjobs.store import get_store

    now = get_store(alias).db_now()
    rng = random.Random(23)
    kinds = {"shop.send_receipt": (0.08, "default"), "shop.resize_image": (0.6, "media"),
             "reports.nightly": (28.0, "reports"), "shop.sync_stock": (2.5, "default")}
    jobs = {name: Job.objects.using(alias).create(name=name, queue=queue, status="succeeded")
            for name, (_, queue) in kinds.items()}
    attempts = []
    for minute in range(60):
        for _ in range(rng.randint(18, 40)):
            name = rng.choice(list(kinds))
            took = kinds[name][0] * rng.lognormvariate(0, 0.5)
            # Suspended runs (durable sleeps) beside the retries: the two must read apart.
            outcome = rng.choices(["succeeded", "retrying", "failed", "cancelled", "suspended"],
                                  [91, 3, 2, 1, 3] if not 18 <= minute <= 22
                                  else [45, 30, 18, 2, 5])[0]
            finished = now - timedelta(minutes=minute, seconds=rng.uniform(0, 59))
            attempts.append(JobAttempt(job=jobs[name], attempt=1, outcome=outcome,
                                       started_at=finished - timedelta(seconds=took),
                                       finished_at=finished))
    JobAttempt.objects.using(alias).bulk_create(attempts)
    for queue, waited in (("default", 40), ("media", 260), ("reports", 1500)):
        Job.objects.using(alias).create(name="shop.sync_stock", queue=queue,
                                        visible_at=now - timedelta(seconds=waited))


def _log_in(browser: Any, base: str, user: Any, then: str) -> None:
    browser.get(f"{base}/admin/login/?next={then}")
    browser.find_element(By.ID, "id_username").send_keys(user.username)
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()


def test_charts_in_light_and_dark_in_a_real_browser(
        pg_alias: str, live_server: Any, browser: Any, operator: Any,
        screenshots: Path) -> None:
    """rule 81 (svg-charts): the summary's charts render in both of Django's themes, with their
    text."""
    _history(pg_alias)
    base = live_server.url
    _log_in(browser, base, operator, "/admin/django_ultjobs/")
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "ultjobs-charts"))
    for theme in ("light", "dark"):
        # Django's theme toggle keeps the choice in localStorage; its theme.js applies it.
        browser.execute_script(f"localStorage.setItem('theme', '{theme}')")
        browser.get(f"{base}/admin/django_ultjobs/")
        assert browser.execute_script(
            "return document.documentElement.dataset.theme") == theme
        charts = browser.find_element(By.ID, "ultjobs-charts")
        svgs = charts.find_elements(By.CSS_SELECTOR, "svg.ultjobs-chart")
        assert len(svgs) == 3 and all(s.size["width"] > 300 for s in svgs)
        # The bars are painted (a class the stylesheet colours), not left black or invisible.
        fill = browser.execute_script(
            "return getComputedStyle(document.querySelector('.ultjobs-o-succeeded')).fill")
        assert fill not in ("", "none", "rgb(0, 0, 0)"), fill
        assert "reports.nightly" in charts.text and "reports" in charts.text
        shoot(browser, screenshots, f"app-index-charts-{theme}")
    browser.get(f"{base}/admin/django_ultjobs/job/?name=reports.nightly&charts=24h")
    assert "Runs of reports.nightly, last 24 hours" in body_text(browser)
    assert "?e=1" not in browser.current_url
    shoot(browser, screenshots, "job-name-charts-dark")
    browser.execute_script("localStorage.setItem('theme', 'light')")


def test_progress_and_tags_in_a_real_browser(
        pg_alias: str, live_server: Any, browser: Any, viewer: Any, tmp_path: Path,
        screenshots: Path) -> None:
    """A run's ``ctx.set_progress`` shows as "37 / 100 — message" and a bar in the in-flight
    list, in full at 1440 px (rule 79 (progress-throttled-fenced)); its tag links to the jobs
    carrying it (rule 78 (tags-stored-whole))."""
    base = live_server.url
    release = tmp_path / "release"
    job = block_until.using(tags=["customer:42"]).enqueue(str(release), label="importing rows",
                                                         progress=37)
    with running_worker(pg_alias, **FAST):
        wait_until(lambda: Job.objects.using(pg_alias).get(id=job.id).progress,
                   message="progress stored")
        browser.get(f"{base}/admin/login/?next=/admin/django_ultjobs/")
        browser.find_element(By.ID, "id_username").send_keys(viewer.username)
        browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "ultjobs-summary"))

        open_until(browser, f"{base}/admin/django_ultjobs/inflightjob/", f"#{job.id}")
        cell = browser.find_element(By.CSS_SELECTOR, "#result_list td.field-progress_display")
        assert cell.text == "37 / 100 — importing rows"
        bar = cell.find_element(By.TAG_NAME, "progress")
        assert (bar.get_attribute("value"), bar.get_attribute("max")) == ("37", "100")
        assert bar.size["width"] > 0
        assert_column_visible(browser, "#result_list td.field-progress_display")
        assert_column_visible(browser, "#result_list td.field-enqueued_by_display")
        shoot(browser, screenshots, "in-flight-progress")

        browser.get(f"{base}/admin/django_ultjobs/job/{job.id}/change/")
        assert "37 / 100 — importing rows" in body_text(browser)
        browser.find_element(By.CSS_SELECTOR, "a.ultjobs-tag").click()
        WebDriverWait(browser, 10).until(lambda d: "tag=customer" in d.current_url)
        rows = browser.find_elements(By.CSS_SELECTOR, "#result_list td.field-job_id")
        assert [r.text for r in rows] == [f"#{job.id}"]
        release.touch()
        wait_until(lambda: Job.objects.using(pg_alias).get(id=job.id).status == "succeeded",
                   message="job done")
