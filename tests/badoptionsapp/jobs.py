"""``bad_options``: a job declared with the options ``ULTJOBS_TEST_BAD_OPTIONS`` gives (JSON), in
the worker processes of tests/worker/test_option_bounds.py only: a declaration the database
cannot hold must stop the process that imports it, before it claims anything
(rule 54 (bad-flow-option-refused))."""

from __future__ import annotations

import json
import os

from django_ultjobs import job


@job(name="bad_options", **json.loads(os.environ["ULTJOBS_TEST_BAD_OPTIONS"]))
def bad_options() -> None:
    """Do nothing: the declaration is what is tested."""
