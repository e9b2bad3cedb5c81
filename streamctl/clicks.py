"""Click load for the example pipeline (`examples/clickstream`): JSON clicks and their ledger.

A click is a JSON object as any web producer would write it: `event_id` (unique per run),
`user_id`, `page`, `ts` (epoch ms) and sometimes a `referrer`. The ledger keeps the event ids
the broker acknowledged, so the end of the pipeline can be checked: every one exactly once.
Neighbours: `loadgen` (drives the producer and the rate), `ledger` (what every ledger counts).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from streamctl.ledger import AckedLedger

PAGES = ("/", "/products/1", "/products/2", "/products/3", "/cart", "/checkout", "/blog/a",
         "/blog/b", "/help", "/about")
REFERRERS = (None, None, "https://search.example", "https://social.example")


@dataclass
class ClickEvents:
    """Makes clicks of `users` users; `hot_key_share` of them from user 0."""

    users: int = 200
    hot_key_share: float = 0.0
    run_tag: str = ""
    """Makes event ids unique across generator runs."""
    _next: int = 0

    def __post_init__(self) -> None:
        if self.users < 1:
            raise ValueError(f"users must be >= 1, got {self.users}")
        if not 0 <= self.hot_key_share <= 1:
            raise ValueError(f"hot_key_share must be in [0, 1], got {self.hot_key_share}")

    def make(self, rng: random.Random, now_ms: int) -> tuple[str, dict[str, object]]:
        """(key, click): keyed by user, like a web tier partitioning by session would."""
        hot = self.hot_key_share and rng.random() < self.hot_key_share
        user = f"user-{0 if hot else rng.randrange(self.users):05d}"
        click: dict[str, object] = {"event_id": f"{self.run_tag}{self._next}", "user_id": user,
                                    "page": rng.choice(PAGES), "ts": now_ms}
        referrer = rng.choice(REFERRERS)
        if referrer is not None:
            click["referrer"] = referrer
        self._next += 1
        return user, click


def encode(click: dict[str, object]) -> bytes:
    return json.dumps(click, separators=(",", ":")).encode()


@dataclass
class ClickLedger(AckedLedger[dict[str, object]]):
    """Event ids the broker acknowledged."""

    event_ids: set[str] = field(default_factory=set)

    def _keep(self, click: dict[str, object]) -> None:
        self.event_ids.add(str(click["event_id"]))
