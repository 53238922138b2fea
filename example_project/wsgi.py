"""WSGI entry point: ``gunicorn example_project.wsgi``.

Tracing (when ``OTEL_TRACES_EXPORTER`` is set) is switched on by ``django.setup()`` inside
``get_wsgi_application()``, through ``ShopConfig.ready()``; see ``example_project/otel.py``.
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

application = get_wsgi_application()
