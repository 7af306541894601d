"""The sealed placeholder mapping of an escalated request (proxy.server.flow.review.sealed_mapping)."""

from __future__ import annotations

import pytest

from proxy.server.flow.review.sealed_mapping import open_mapping, seal_mapping

MAPPING = {"<PERSON_1>": "Ana Dias", "<EMAIL_ADDRESS_1>": "ana@example.com"}


def test_the_key_opens_its_mapping_and_the_sealed_text_holds_no_original() -> None:
    key, sealed = seal_mapping(MAPPING)
    assert open_mapping(sealed, key) == MAPPING
    assert "Ana" not in sealed and "example" not in sealed and key not in sealed
    assert len(key) == 43


def test_each_seal_has_its_own_key() -> None:
    key_a, sealed_a = seal_mapping(MAPPING)
    key_b, sealed_b = seal_mapping(MAPPING)
    assert key_a != key_b and sealed_a != sealed_b
    with pytest.raises(ValueError, match="does not open"):
        open_mapping(sealed_a, key_b)


@pytest.mark.parametrize("key", ["", "short", "not base64 at all!", "é" * 43, "A" * 44])
def test_a_malformed_key_is_a_value_error(key: str) -> None:
    _, sealed = seal_mapping(MAPPING)
    with pytest.raises(ValueError):
        open_mapping(sealed, key)
