"""What ``EnqueuedByMiddleware`` costs a request on SQLite, where it looks the user up early.

    python -m benchmarks.request_actor [--requests 2000] [--rounds 5]

Times requests through the test client to a view that never touches ``request.user`` (the worst
case: the middleware's lookup is the only one) and to one that does (the lookup is then done once
either way), with and without the middleware, for a logged-in client and for one without a
session cookie. Rounds are interleaved, so a noisy machine slows every variant alike; the table
gives the median per-request time of each variant over its rounds.
"""

from __future__ import annotations

import argparse
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


def configure(directory: Path) -> None:
    settings.configure(
        SECRET_KEY="benchmark-only",
        USE_TZ=True,
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes",
                        "django.contrib.sessions", "django_ultjobs"],
        DATABASES={"default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(directory / "actor.sqlite3"),
            "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE",
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


def per_request_ms(client, url: str, middleware: list[str], requests: int) -> float:  # noqa: ANN001
    from django.test import override_settings

    with override_settings(MIDDLEWARE=middleware):
        client.get(url)  # the handler is built per settings change: not timed
        started = time.perf_counter()
        for _ in range(requests):
            client.get(url)
        return (time.perf_counter() - started) * 1000 / requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        configure(Path(tmp))
        urlpatterns.extend(_views())
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.test import Client

        call_command("migrate", verbosity=0)
        logged_in = Client()
        logged_in.force_login(get_user_model().objects.create_user("ada"))
        variants = {
            (who, url, label): (client, url, middleware)
            for who, client in (("logged in", logged_in), ("no session cookie", Client()))
            for url in ("/plain/", "/greets/")
            for label, middleware in (("without", MIDDLEWARE), ("with", [*MIDDLEWARE, ACTOR]))
        }
        times: dict[tuple[str, str, str], list[float]] = {key: [] for key in variants}
        for _ in range(args.rounds):
            for key, (client, url, middleware) in variants.items():
                times[key].append(per_request_ms(client, url, middleware, args.requests))
    print(f"EnqueuedByMiddleware on SQLite: median ms per request over {args.rounds} rounds of "
          f"{args.requests}")
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
