"""A small shop that queues its receipts with django_ultjobs (see ``manage.py demo``)."""
