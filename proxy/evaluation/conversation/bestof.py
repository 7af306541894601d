"""BestOf (Fair Forge): a single-elimination tournament over n candidate answers.

Each round pairs the remaining candidates in order (1st vs 2nd, 3rd vs 4th, …); with an odd
count the last one advances on a bye. ⌈n/2⌉ advance, so the tournament has ⌈log₂ n⌉ rounds and
n − 1 contests. A contest asks the judge (template ``bestof-contest-v1``) on each criterion of
:data:`CRITERIA` how much better answer A is than answer B (score ∈ [0, 1]: 1 = A clearly better,
0.5 = equal, 0 = B clearly better); the contest score is s = Σ w_c s_c with the criterion weights
(≥ 0, sum 1). A wins when s ≥ 0.5 (a tie goes to the earlier candidate). The contest's
confidence is |2s − 1| (0 = a coin toss, 1 = unanimous and certain); the aggregate confidence is
the mean confidence of the contests the winner won (its path to the title; 1.0 for n = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

__all__ = ["CRITERIA", "CRITERIA_WEIGHTS", "Bracket", "Contest", "contest_score", "rounds_needed", "tournament"]

CRITERIA = ("relevance", "accuracy", "coherence", "helpfulness")
#: Default criterion weights (accuracy first: a wrong answer is the worst kind of unhelpful).
CRITERIA_WEIGHTS = {"relevance": 0.25, "accuracy": 0.35, "coherence": 0.15, "helpfulness": 0.25}


@dataclass(frozen=True)
class Contest:
    """One contest: ``round`` (1-based), candidate indexes ``a``/``b``, the criterion ``scores``
    (A over B), the weighted ``score``, the ``winner`` index, its ``confidence`` and the judge's
    ``reasoning`` per criterion."""

    round: int
    a: int
    b: int
    scores: dict[str, float]
    score: float
    winner: int
    confidence: float
    reasoning: dict[str, str]


def rounds_needed(n: int) -> int:
    """⌈log₂ n⌉ (0 for one candidate). Raises ValueError for n < 1."""
    if n < 1:
        raise ValueError("a tournament needs at least one candidate")
    return math.ceil(math.log2(n)) if n > 1 else 0


def contest_score(scores: Mapping[str, float], weights: Mapping[str, float] = CRITERIA_WEIGHTS) -> float:
    """s = Σ w_c s_c over :data:`CRITERIA`. Raises ValueError for a missing criterion, a score
    outside [0, 1] or weights that are negative or do not sum to 1."""
    if any(weights.get(c, -1) < 0 for c in CRITERIA) or abs(sum(weights[c] for c in CRITERIA) - 1) > 1e-9:
        raise ValueError(f"criterion weights must cover {CRITERIA}, be >= 0 and sum to 1, got {dict(weights)}")
    if any(not 0.0 <= scores.get(c, -1.0) <= 1.0 for c in CRITERIA):
        raise ValueError(f"contest scores must give each of {CRITERIA} a value in [0, 1], got {dict(scores)}")
    return sum(weights[c] * scores[c] for c in CRITERIA)


class Bracket:
    """The state of one tournament over candidates ``0 .. n−1``, round by round (no I/O: the caller
    asks the judge about :meth:`next_round`'s pairs, sync or async, and hands the verdicts to
    :meth:`record`). Raises ValueError for n < 1 or verdicts that do not match the round."""

    def __init__(self, n: int, weights: Mapping[str, float] = CRITERIA_WEIGHTS) -> None:
        self.n, self.rounds, self.weights = n, rounds_needed(n), weights
        self.alive: list[int] = list(range(n))
        self.contests: list[Contest] = []
        self.byes: list[tuple[int, int]] = []
        self.round = 0
        self._pairs: list[tuple[int, int]] = []

    def next_round(self) -> list[tuple[int, int]]:
        """The ``(a, b)`` pairs of the next round ([] when the tournament is over)."""
        if len(self.alive) < 2:
            return []
        self.round += 1
        self._pairs = [(self.alive[i], self.alive[i + 1]) for i in range(0, len(self.alive) - 1, 2)]
        return list(self._pairs)

    def record(self, verdicts: Sequence[tuple[Mapping[str, float], Mapping[str, str]]]) -> None:
        """The judge's ``(criterion scores of A over B, criterion reasoning)`` per pair of the round."""
        if len(verdicts) != len(self._pairs) or not self._pairs:
            raise ValueError(f"round {self.round} needs {len(self._pairs)} verdicts, got {len(verdicts)}")
        advancing = []
        for (a, b), (scores, reasoning) in zip(self._pairs, verdicts):
            score = contest_score(scores, self.weights)
            winner = a if score >= 0.5 else b
            self.contests.append(Contest(self.round, a, b, dict(scores), score, winner, abs(2 * score - 1),
                                         dict(reasoning)))
            advancing.append(winner)
        if len(self.alive) % 2:
            self.byes.append((self.round, self.alive[-1]))
            advancing.append(self.alive[-1])
        self.alive, self._pairs = advancing, []

    def result(self) -> dict[str, Any]:
        """``{"winner", "rounds", "contests": [Contest as dict], "confidence", "byes": [(round, index)]}``.
        Raises ValueError while rounds remain."""
        if len(self.alive) != 1:
            raise ValueError("the tournament is not finished")
        winner = self.alive[0]
        path = [c.confidence for c in self.contests if c.winner == winner]
        return {"winner": winner, "rounds": self.rounds, "byes": self.byes,
                "contests": [c.__dict__ for c in self.contests],
                "confidence": sum(path) / len(path) if path else 1.0}


def tournament(n: int, judge: Callable[[int, int], tuple[dict[str, float], dict[str, str]]],
               weights: Mapping[str, float] = CRITERIA_WEIGHTS) -> dict[str, object]:
    """Run the tournament over candidates ``0 .. n−1`` with a synchronous ``judge(a, b)`` returning
    ``(criterion scores of A over B, criterion reasoning)``; :meth:`Bracket.result`."""
    bracket = Bracket(n, weights)
    while pairs := bracket.next_round():
        bracket.record([judge(a, b) for a, b in pairs])
    return bracket.result()
