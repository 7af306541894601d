"""Ledger storage: the store roles (:mod:`proxy.storage.base`) and one back end per module.

:mod:`proxy.storage.sqlite` (embedded, single node) and
:mod:`proxy.storage.redis` (many processes, Redis Cluster) implement
:class:`~proxy.storage.base.LedgerStore`; :func:`open_store` picks one from a
ledger URL.
"""

from proxy.storage.base import *  # noqa: F401,F403  (the roles, errors and open_store)
from proxy.storage.base import __all__  # noqa: F401
