"""Ledger storage: the store roles (:mod:`proxy.storage.base`) and one back end per module.

:mod:`proxy.storage.sqlite` (embedded, single node) and
:mod:`proxy.storage.redis` (many processes, Redis Cluster) implement
:class:`~proxy.storage.base.LedgerStore`; :func:`open_store` picks one from a
ledger URL.
"""

from proxy.storage.base import (
    QUEUES,
    Head,
    LedgerConflict,
    LedgerError,
    LedgerStore,
    LedgerUnavailable,
    ReceiptLog,
    ReviewQueue,
    TreeStore,
    TreeUpdate,
    open_store,
)

__all__ = [
    "QUEUES",
    "Head",
    "LedgerConflict",
    "LedgerError",
    "LedgerStore",
    "LedgerUnavailable",
    "ReceiptLog",
    "ReviewQueue",
    "TreeStore",
    "TreeUpdate",
    "open_store",
]
