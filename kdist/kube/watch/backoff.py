"""How the watches and log followers wait after a failure, and what counts as one."""

from __future__ import annotations

from dataclasses import dataclass

# A watch or log stream that ends this fast with nothing in it counts as a failure
# (backoff), so a server or proxy that keeps closing at once is not hammered.
QUICK_END = 1.0


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential backoff: `attempts` failures in a row, then give up.

    With `give_up_after`, also give up once failures have gone on that long
    (at least two of them): a wait that should be short fails within about
    twice the request deadline instead of riding out minutes of backoff.
    """

    attempts: int = 8
    first: float = 0.5
    cap: float = 15.0
    give_up_after: float | None = None

    def delay(self, failure: int) -> float:
        return min(self.cap, self.first * 2 ** (failure - 1))


#: The watches' backoff: pauses of 0.5, 1, 2, 4, 8, 15, 15 s, so a server that fails every
#: watch sees about ten requests in the first 10 s and an answer (give up) after about 45 s.
WATCH_BACKOFF = Backoff()
