"""The fleet-slot half of the store: one row per held ``(key, slot)``, timed by the database."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from .records import SlotHold


class SlotStore(ABC):
    """Fleet slots as rows, one per held ``(key, slot)``, every expiry on the database clock."""

    def acquire(self, key: str, limit: int, ttl: float, holder: str) -> SlotHold | None:
        """Take the lowest free slot of ``key`` below ``limit`` in one statement; None when all
        are held."""
        return self.acquire_many(key, limit, ttl, [holder]).get(holder)

    def acquire_many(self, key: str, limit: int, ttl: float,
                     holders: Sequence[str]) -> dict[str, SlotHold]:
        """Take one free slot of ``key`` for each of ``holders`` (lowest slots first, in holder
        order) in ONE statement; holders missing from the answer got none."""
        if not holders:
            return {}
        params = {"key": key, "limit": limit, "ttl": float(ttl),
                  "holders": self.holders_param(holders), "now": self.now_param()}
        with self.cursor() as cur:
            cur.execute(self.sql["slot_acquire"], params)
            rows = cur.fetchall()
        return {
            row[2]: SlotHold(key=row[0], slot=row[1], holder=row[2],
                              expires_at=self.parse_time(row[3]))
            for row in rows
        }

    def acquire_keys(self, wanted: Sequence[tuple[str, int, str]], ttl: float
                     ) -> dict[str, SlotHold]:
        """``acquire_many`` for many keys in ONE statement: ``wanted`` is ``(key, limit,
        holder)`` per run (rule 50 (per-key-cap)); holders missing from the answer got none."""
        if not wanted:
            return {}
        with self.cursor() as cur:
            cur.execute(self.sql["slot_acquire_keys"], {
                **self.wanted_params(wanted), "ttl": float(ttl), "now": self.now_param()})
            rows = cur.fetchall()
        return {
            row[2]: SlotHold(key=row[0], slot=row[1], holder=row[2],
                             expires_at=self.parse_time(row[3]))
            for row in rows
        }

    @staticmethod
    def wanted_params(wanted: Sequence[tuple[str, int, str]]) -> dict[str, Any]:
        """``acquire_keys``'s requests as this engine's parameters (arrays; SQLite: JSON)."""
        return {"keys": [w[0] for w in wanted], "limits": [w[1] for w in wanted],
                "holders": [w[2] for w in wanted]}

    def commit_mode(self) -> str | None:
        """The ``synchronous_commit`` a statement that a crash may undo without harm commits
        with (rule 93 (unflushed-slot-release)); None keeps the session's. Engines that can say
        override."""
        return None

    @staticmethod
    def holders_param(holders: Sequence[str]) -> Any:
        """Holders in this engine's parameter form (an array; SQLite: JSON)."""
        return list(holders)

    def renew_many(self, held: Sequence[SlotHold], ttl: float) -> set[tuple[str, int, str]]:
        """Extend each slot still held by its holder and unexpired, in one statement; return the
        ``(key, slot, holder)`` of each one renewed. A slot missing from the answer is lost
        (rule 7 (fenced-slot-renewal)). The holder is part of the answer: two holds of one slot (one
        lapsed, then taken again) must never be told apart by ``(key, slot)`` alone."""
        if not held:
            return set()
        with self.cursor() as cur:
            cur.execute(self.sql["slot_renew"], {**self.held_params(held), "ttl": float(ttl),
                                                  "now": self.now_param()})
            return {(row[0], row[1], row[2]) for row in cur.fetchall()}

    def release_many(self, held: Sequence[SlotHold]) -> None:
        """Hand back slots in one statement; one that another holder has taken meanwhile is left
        alone (fenced on holder)."""
        if not held:
            return
        with self.cursor() as cur:
            cur.execute(self.sql["slot_release"],
                        {**self.held_params(held), "commit_mode": self.commit_mode()})

    @staticmethod
    @abstractmethod
    def held_params(held: Sequence[SlotHold]) -> dict[str, Any]:
        """The held slots as this engine's parameters for the renew and release queries."""

    def renew(self, held: SlotHold, ttl: float) -> bool:
        """Extend one slot hold: False when another holder took it OR it lapsed
        (rule 7 (fenced-slot-renewal))."""
        return (held.key, held.slot, held.holder) in self.renew_many([held], ttl)

    def release(self, held: SlotHold) -> None:
        """Hand back one slot."""
        self.release_many([held])
