"""The record every verifier reports a failed check with (receipts, chain, checkpoints, proofs,
cosignatures): printed as one line by ``sonate verify``."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Failure"]


@dataclass(frozen=True)
class Failure:
    """One failed check: where (``height``, ``receipt_id``; None when unknown), which ``check``, why.

    ``where`` (optional) names a place that is not a receipt, e.g.
    ``"checkpoint (tree size 42)"`` or ``"inclusion proof"``; when set it
    replaces the height in the printed form.
    """

    height: int | None
    receipt_id: str | None
    check: str
    detail: str
    where: str | None = None

    def __str__(self) -> str:
        if self.where is not None:
            return f"{self.where}: {self.check}: {self.detail}"
        where = "height ?" if self.height is None else f"height {self.height}"
        if self.receipt_id:
            where += f" ({self.receipt_id})"
        return f"{where}: {self.check}: {self.detail}"
