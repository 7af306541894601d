"""One chat completion through an installed ``sonate serve``: the check of a serving install.

Used where the proxy runs from somewhere other than this checkout (a fresh virtualenv with the
serving dependencies only, the container image's root filesystem), so it starts the proxy by a
command line it is given::

    python -m tests.support.smoke --dir DIR [--seen-as PATH] [--policies PATH] [--env K=V ...] -- COMMAND...

``COMMAND`` is run with ``--config <seen-as>/config.yaml --host 127.0.0.1 --port <free port>``
appended and an environment of ``PATH``, ``HOME``, the three keys and the ``--env`` pairs only.
The config is deploy/config.container.yaml (keys from the environment) with a ``stub`` route to
this process's stub provider, a SQLite ledger and the signing key under ``DIR``; ``--seen-as`` is
where the proxy sees ``DIR`` (a chroot), ``--policies`` its policies directory (default: a copy
of policies/ in ``DIR``). It waits for ``/readyz``, sends one chat completion, verifies the
receipt's signature with the keys of ``/v1/keys``, stops the proxy and prints one JSON line.
Exit status 0 when all of that held, 1 otherwise (with the proxy's log).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from proxy.receipts.signing import load_public_keys
from proxy.receipts.verify import verify_receipt
from tests.support.redis_server import free_port
from tests.support.stub_upstream import Reply, StubUpstream

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("SONATE_CLIENT_KEY", "SONATE_ADMIN_KEY", "SONATE_METRICS_KEY")
PROMPT = "What is the boiling point of water at sea level, in degrees Celsius?"
ANSWER = "100 degrees Celsius."


def write_config(directory: Path, seen_as: Path, policies: Path, stub_url: str) -> Path:
    """The container config plus a ``stub`` route; paths as the proxy sees them (``seen_as``)."""
    config = yaml.safe_load((ROOT / "deploy" / "config.container.yaml").read_text())
    config["model_list"].insert(0, {"model_name": "stub", "litellm_params": {
        "model": "openai/stub-model", "api_base": stub_url, "api_key": "not-needed"}})
    config["policies"] = str(policies)
    config["ledger"] = {"url": f"sqlite:///{seen_as / 'ledger.db'}"}
    config["signing"] = {"key_file": str(seen_as / "signing-key.json")}
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def call(url: str, key: str | None = None, body: dict | None = None) -> tuple[int, dict, dict]:
    """(status, headers, JSON body) of GET or (with ``body``) POST ``url``."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read() or b"{}")


def wait_ready(url: str, process: subprocess.Popen, timeout: float) -> float:
    """Seconds until ``GET url`` answered 200; RuntimeError if the process exits or time runs out."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"the proxy exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return time.monotonic() - start
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"no 200 from {url} within {timeout:.0f} s")


def check(base: str, keys: dict[str, str], stub: StubUpstream) -> dict:
    """Send the chat completion and check answer, receipt and signature; returns the figures."""
    stub.queue(Reply(text=ANSWER))
    status, headers, body = call(f"{base}/v1/chat/completions", keys["SONATE_CLIENT_KEY"],
                                 {"model": "stub", "messages": [{"role": "user", "content": PROMPT}]})
    assert status == 200, (status, body)
    assert body["choices"][0]["message"]["content"] == ANSWER, body
    assert [m["content"] for m in stub.received()[-1]["messages"]] == [PROMPT]
    headers = {k.lower(): v for k, v in headers.items()}
    receipt_id, action = headers["x-sonate-receipt-id"], headers["x-sonate-guardrail-action"]
    status, _, receipt = call(f"{base}/v1/receipts/{receipt_id}", keys["SONATE_CLIENT_KEY"])
    assert status == 200, (status, receipt)
    _, _, published = call(f"{base}/v1/keys")
    failures = verify_receipt(receipt, load_public_keys(published))
    assert failures == [], failures
    return {"receipt_id": receipt_id, "action": action, "signature": "valid"}


def main(argv: list[str] | None = None) -> int:
    """Run the check (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.smoke")
    parser.add_argument("--dir", type=Path, required=True, help="where config, ledger and key go")
    parser.add_argument("--seen-as", type=Path, help="--dir as the proxy sees it (default: the same)")
    parser.add_argument("--policies", type=Path, help="the policies directory as the proxy sees it")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the proxy's environment")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for /readyz")
    parser.add_argument("command", nargs="+", help="the command that serves, e.g. /venv/bin/sonate serve")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    seen_as = args.seen_as or args.dir.resolve()
    policies = args.policies
    if policies is None:
        shutil.copytree(ROOT / "policies", args.dir / "policies", dirs_exist_ok=True)
        policies = seen_as / "policies"
    stub = StubUpstream().start()
    config = write_config(args.dir, seen_as, policies, stub.url)
    keys = {name: f"sk-{secrets.token_urlsafe(32)}" for name in KEYS}
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(seen_as), **keys,
           **dict(pair.split("=", 1) for pair in args.env)}
    log_path = args.dir / "proxy.log"
    command = [*args.command, "--config", str(seen_as / config.name), "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=env, cwd=args.dir, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        ready = wait_ready(f"{base}/readyz", process, args.timeout)
        result = {"ready_seconds": round(ready, 1), **check(base, keys, stub)}
    except (AssertionError, RuntimeError, KeyError) as error:
        print(f"smoke: FAILED: {error!r}\n--- proxy log ---\n{log_path.read_text(errors='replace')[-6000:]}",
              file=sys.stderr)
        return 1
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
        stub.stop()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
