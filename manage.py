#!/usr/bin/env python
"""Django's command-line utility for the example project (``python manage.py demo``)."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    try:
        from django.core.management import execute_from_command_line
    except ImportError as exc:
        raise ImportError(
            "Couldn't import Django. Install the example first: pip install -e '.[example]'"
        ) from exc
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
