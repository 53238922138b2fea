"""The example project's ``manage.py demo`` shows what it says: the receipts and the charge_card
job each one queues, the flaky export's retries, and the cancellable slow report cancelled while
it runs. CI greps its output for "attempt outcomes" (the table) and "demo jobs succeeded".
"""

from io import StringIO

import pytest
from django.core.management import call_command

from django_ultjobs.models import AttemptRecord, Job

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_the_demo_cancels_its_report_and_lists_the_charges() -> None:
    out = StringIO()
    call_command("demo", "--timeout", "120", stdout=out, stderr=StringIO(), no_color=True)
    text = out.getvalue()
    assert "attempt outcomes" in text and "demo jobs succeeded" in text

    jobs = {j.id: j for j in Job.objects.all()}
    charges = [j for j in jobs.values() if j.name == "charge_card"]
    receipts = [j for j in jobs.values() if j.name == "send_receipt"]
    assert len(charges) == len(receipts) == 3
    assert all(j.status == "succeeded" for j in charges)
    table = text[text.index("attempt outcomes"):text.index("Attempt errors")]
    for charge in charges:  # every charge is a row of the table
        assert f"\n{charge.id} " in table and "charge_card" in table

    # The batch's callback ran once its three receipts succeeded; the chain ran in order.
    (summary,) = [j for j in jobs.values() if j.name == "summarize_receipts"]
    assert summary.status == "succeeded" and summary.result["receipts"] == 3
    steps = sorted((j for j in jobs.values() if j.name == "archive_step"), key=lambda j: j.id)
    assert [j.result for j in steps] == [{"step": "export", "after": None},
                                         {"step": "compress", "after": "export"},
                                         {"step": "upload", "after": "compress"}]

    (cancelled,) = [j for j in jobs.values() if j.status == "cancelled"]
    assert cancelled.name == "slow_report"
    assert list(AttemptRecord.objects.filter(job_id=cancelled.id)
                .values_list("outcome", flat=True)) == ["cancelled"]
    assert f"Cancelling slow_report#{cancelled.id} while it runs" in text
    assert f"slow_report#{cancelled.id} was cancelled while it ran" in text

    # The process pool's part: a body that never checks its timeout, ended by killing its child.
    (stuck,) = [j for j in jobs.values() if j.name == "stuck_render"]
    assert stuck.status == "failed"
    assert list(AttemptRecord.objects.filter(job_id=stuck.id)
                .values_list("outcome", flat=True)) == ["timed_out"]
    assert f"stuck_render#{stuck.id}, a busy loop" in text
