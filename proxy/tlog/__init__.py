"""The transparency log over the receipt chain: RFC 9162 Merkle tree hashing and proofs, C2SP
signed checkpoints, and the tree a ledger store keeps (docs/architecture.md "Trust receipts").
"""
