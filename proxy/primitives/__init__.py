"""Pure building blocks the ledger's layers share, with no I/O and no knowledge of receipts, logs
or stores: canonical JSON and its hashes (RFC 8785), Merkle tree hashing (RFC 9162), strict
base64url (RFC 4648 §5) and the verifiers' :class:`~proxy.primitives.failure.Failure` record.
"""
