"""The transparency log's notes: C2SP signed checkpoints and cosignatures, and the C2SP
tlog-witness rules. Knows nothing of receipts: their tree and proofs are :mod:`proxy.receipts.tree`
and :mod:`proxy.receipts.proofs`, the tree hashing :mod:`proxy.primitives.merkle`
(docs/architecture.md "Trust receipts").
"""
