"""``sonate verify --ledger URL --all | --name NAME`` over a SQLite deployment with several ledgers:
every ledger verifies, a receipt tampered with or moved in any one ledger is reported there."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
from pathlib import Path

import pytest

from proxy.cli.verify import add_arguments, run
from proxy.receipts import Ledger, load_or_create_signer
from proxy.receipts.ledgers import Ledgers, discover_ledgers, ledger_names
from tests.support.ledger import make_receipt, sqlite_url


def verify(*argv: str) -> tuple[int, str, str]:
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = run(parser.parse_args(list(argv)), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def deployment(tmp_path: Path) -> tuple[str, Path]:
    """Three team ledgers (default, blue, red) of 6, 4 and 4 receipts; returns (URL, key file)."""
    key_file = tmp_path / "signing-key.json"
    signer = load_or_create_signer(key_file)
    url = sqlite_url(tmp_path / "ledger.db")

    async def write() -> None:
        ledgers = Ledgers(url, "team", ledger_names("team", teams=["blue", "red"]), lambda s: Ledger(s, signer),
                          team_of={"a": "blue", "b": "red"})
        try:
            for actor in ["a", "b", "c"] * 2:
                await ledgers.append([make_receipt(actor=actor), make_receipt(actor=actor)])
            await ledgers.append([make_receipt(actor="c"), make_receipt(actor="c")])
        finally:
            await ledgers.close()
    asyncio.run(write())
    return url, key_file


def test_all_ledgers_verify(deployment: tuple[str, Path]) -> None:
    url, key_file = deployment
    assert asyncio.run(discover_ledgers(url)) == ["default", "blue", "red"]
    assert verify("--ledger", url, "--all", "--keys", str(key_file))[:2] == (0, "OK: 14 ledger receipts verified\n")
    assert verify("--ledger", url, "--name", "red", "--keys", str(key_file))[:2] == (
        0, "OK: 4 ledger receipts verified\n")
    code, _, err = verify("--name", "red", "--keys", str(key_file))
    assert code == 2 and "--ledger" in err


def _edit(path: Path, height: int, change) -> None:
    with sqlite3.connect(path) as db:
        (body,) = db.execute("SELECT body FROM receipts WHERE height = ?", (height,)).fetchone()
        receipt = json.loads(body)
        change(receipt)
        db.execute("UPDATE receipts SET body = ? WHERE height = ?", (json.dumps(receipt), height))


@pytest.mark.parametrize("name", ["default", "blue", "red"])
def test_a_tampered_receipt_in_any_ledger_fails_there(deployment: tuple[str, Path], name: str) -> None:
    url, key_file = deployment
    path = Path(url[len("sqlite:///"):])
    file = path if name == "default" else path.with_name(f"ledger.{name}.db")
    _edit(file, 1, lambda r: r.update(guardrail_action="refuse"))
    code, out, _ = verify("--ledger", url, "--all", "--keys", str(key_file))
    assert code == 1
    lines = [line for line in out.splitlines() if not line.startswith("FAILED")]
    assert lines and all(line.startswith(f"ledger {name} ") for line in lines)
    assert any("signature" in line for line in lines)


def test_a_receipt_relabelled_to_another_ledger_is_caught(deployment: tuple[str, Path]) -> None:
    url, key_file = deployment
    path = Path(url[len("sqlite:///"):])
    _edit(path.with_name("ledger.red.db"), 0, lambda r: r.update(ledger="blue"))
    code, out, _ = verify("--ledger", url, "--name", "red", "--keys", str(key_file))
    assert code == 1 and "ledger red height 0" in out and ": ledger: receipt names ledger 'blue'" in out
