"""What ``EnqueuedByMiddleware`` costs a request on SQLite, where it looks the user up early.

    python -m benchmarks.request_actor [--requests 2000] [--rounds 5] [--transaction-mode DEFERRED]

Times requests through the test client to a view that never touches ``request.user`` (the worst
case: the middleware's lookup is the only one) and to one that does (the lookup is then done once
either way), with and without the middleware, for a logged-in client and for one without a
session cookie. Rounds are interleaved, so a noisy machine slows every variant alike; the table
gives the median per-request time of each variant over its rounds. The early lookup happens only
in the deferred transaction mode (Django's default); in IMMEDIATE the middleware stays lazy.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import django
from django.conf import settings

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ACTOR = "django_ultjobs.middleware.EnqueuedByMiddleware"


def configure(directory: Path, mode: str) -> None:
    settings.configure(
        SECRET_KEY="benchmark-only",
        USE_TZ=True,
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes",
                        "django.contrib.sessions", "django_ultjobs"],
        DATABASES={"default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(directory / "actor.sqlite3"),
            "OPTIONS": {"timeout": 30, "transaction_mode": mode,
                        "init_command": "PRAGMA journal_mode=WAL;"},
        }},
        MIDDLEWARE=MIDDLEWARE,
        ROOT_URLCONF=__name__,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()


def _views() -> list:
    from django.http import HttpResponse
    from django.urls import path

    def plain(request):  # noqa: ANN001, ANN202 - a view for the benchmark only
        return HttpResponse("ok")

    def greets(request):  # noqa: ANN001, ANN202
        return HttpResponse(request.user.get_username())

    return [path("plain/", plain), path("greets/", greets)]


urlpatterns: list = []


def per_request_ms(cookies, url: str, middleware: list[str], requests: int) -> float:  # noqa: ANN001
    from django.test import Client, override_settings

    with override_settings(MIDDLEWARE=middleware):
        # A client builds its middleware chain at its first request and keeps it: a new one
        # per variant, with the variant's cookies; its first request is not timed.
        client = Client()
        client.cookies = copy.deepcopy(cookies)
        client.get(url)
        started = time.perf_counter()
        for _ in range(requests):
            client.get(url)
        return (time.perf_counter() - started) * 1000 / requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--transaction-mode", default="DEFERRED",
                        choices=["DEFERRED", "IMMEDIATE"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        configure(Path(tmp), args.transaction_mode)
        urlpatterns.extend(_views())
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.test import Client

        call_command("migrate", verbosity=0)
        logged_in = Client()
        logged_in.force_login(get_user_model().objects.create_user("ada"))
        variants = {
            (who, url, label): (cookies, url, middleware)
            for who, cookies in (("logged in", logged_in.cookies),
                                 ("no session cookie", Client().cookies))
            for url in ("/plain/", "/greets/")
            for label, middleware in (("without", MIDDLEWARE), ("with", [*MIDDLEWARE, ACTOR]))
        }
        times: dict[tuple[str, str, str], list[float]] = {key: [] for key in variants}
        for _ in range(args.rounds):
            for key, (cookies, url, middleware) in variants.items():
                times[key].append(per_request_ms(cookies, url, middleware, args.requests))
    print(f"EnqueuedByMiddleware on SQLite ({args.transaction_mode}): median ms per request over "
          f"{args.rounds} rounds of {args.requests}")
    print("client | view | without | with | cost per request")
    print("--- | --- | --: | --: | --:")
    for who in ("logged in", "no session cookie"):
        for url, view in (("/plain/", "never reads request.user"),
                          ("/greets/", "reads request.user")):
            without = statistics.median(times[(who, url, "without")])
            with_ = statistics.median(times[(who, url, "with")])
            print(f"{who} | {view} | {without:.3f} | {with_:.3f} | "
                  f"{(with_ - without) * 1000:+.0f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
