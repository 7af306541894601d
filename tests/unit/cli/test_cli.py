"""The ``sonate`` command line: the command table, the module contract and the usage-error mapping.

Every command of :data:`proxy.cli.COMMANDS` must be listed by ``sonate --help`` and its module must
satisfy the contract of :mod:`proxy.cli.common`; a user-fixable error raised by a command must end
as one ``sonate: <message>`` line on stderr with exit status 2 and no traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.cli import COMMANDS, build_parser, command_module, main, named_command
from proxy.cli.common import EXIT_USAGE
from tests.support.forked import sonate

ROOT = Path(__file__).resolve().parents[3]
#: Imported only by the commands that need them, never by building the parser.
HEAVY_MODULES = ("aiohttp", "litellm", "presidio_analyzer", "torch", "transformers", "redis")


def _one_line(text: str) -> str:
    """argparse wraps help text; compare with whitespace collapsed."""
    return " ".join(text.split())


def _takes_one_argument(function: object) -> bool:
    try:
        inspect.signature(function).bind(argparse.Namespace())  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def test_help_lists_every_command_of_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    listing = _one_line(capsys.readouterr().out)
    assert set(COMMANDS) == {"serve", "verify", "keys", "ledger", "report", "eval", "train", "witness", "models",
                             "policy"}
    for name in COMMANDS:
        assert f"{name} {_one_line(command_module(name).HELP)}" in listing, name


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_module_satisfies_the_contract(name: str) -> None:
    module = command_module(name)
    assert isinstance(module.HELP, str) and module.HELP.strip(), name
    if hasattr(module, "SUBCOMMANDS"):
        assert isinstance(module.SUBCOMMANDS, dict) and module.SUBCOMMANDS, name
        for sub_name, entry in module.SUBCOMMANDS.items():
            assert isinstance(entry, tuple) and len(entry) == 3, (name, sub_name)
            sub_help, add_arguments, run = entry
            assert isinstance(sub_help, str) and sub_help.strip(), (name, sub_name)
            assert _takes_one_argument(add_arguments) and _takes_one_argument(run), (name, sub_name)
    else:
        assert _takes_one_argument(module.add_arguments) and _takes_one_argument(module.run), name


def test_group_commands_list_and_require_their_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    groups = [name for name in COMMANDS if hasattr(command_module(name), "SUBCOMMANDS")]
    assert {"ledger", "eval", "train"} <= set(groups)
    for name in groups:
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0
        listing = _one_line(capsys.readouterr().out)
        for sub_name, (sub_help, _, _) in command_module(name).SUBCOMMANDS.items():
            assert f"{sub_name} {_one_line(sub_help)}" in listing, (name, sub_name)
        with pytest.raises(SystemExit) as done:
            main([name])
        assert done.value.code == EXIT_USAGE
        assert "required" in capsys.readouterr().err


def test_usage_error_of_a_command_is_one_line_and_exit_2(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert main(["ledger", "reindex", "--ledger", ledger, "--page", "0"]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert (out, err) == ("", "sonate: --page must be >= 1\n")

    assert main(["ledger", "checkpoint", "--ledger", ledger]) == EXIT_USAGE  # a reader creates no ledger
    assert capsys.readouterr().err == (f"sonate: no SQLite ledger at {tmp_path / 'ledger.db'} (the proxy "
                                       "creates it on its first start; check the ledger URL)\n")
    assert not (tmp_path / "ledger.db").exists()
    missing = tmp_path / "typo" / "ledger.db"
    assert main(["keys", "generate", "--key-file", str(tmp_path / "k.json")]) == 0
    capsys.readouterr()
    assert main(["verify", "--ledger", f"sqlite:///{missing}", "--keys", str(tmp_path / "k.json")]) == EXIT_USAGE
    assert f"no SQLite ledger at {missing}" in capsys.readouterr().err
    assert not missing.parent.exists()

    asyncio.run(_create_empty_ledger(tmp_path / "ledger.db"))  # as the proxy's first start does
    capsys.readouterr()
    assert main(["verify", "--ledger", ledger, "--keys", str(tmp_path / "k.json")]) == 0
    out, err = capsys.readouterr()
    assert out == "OK: 0 ledger receipts verified\n"
    assert err == ("sonate verify: warning: the ledger holds no receipt in the range: nothing was verified "
                   "(a new ledger, or a mistyped URL or Redis namespace?)\n")
    assert main(["ledger", "checkpoint", "--ledger", ledger]) == EXIT_USAGE
    assert capsys.readouterr().err == ("sonate: no checkpoint has been published yet "
                                       "(the proxy publishes them; or use --publish)\n")


async def _create_empty_ledger(path: Path) -> None:
    from proxy.storage.sqlite import SQLiteStore

    store = SQLiteStore(path)
    try:
        await store.ping()
    finally:
        await store.close()


def test_verify_on_a_missing_file_exits_2_without_traceback(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.json"
    assert main(["verify", str(missing), "--keys", str(tmp_path / "keys.json")]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"sonate verify: error: cannot read {missing}: No such file or directory\n"


def test_config_and_key_file_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    assert main(["serve", "--config", str(config)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("sonate: configuration error:\n") and f"{config}: file not found" in err

    key_file = tmp_path / "signing.json"
    assert main(["keys", "list", "--key-file", str(key_file)]) == EXIT_USAGE
    assert capsys.readouterr().err == f"sonate: {key_file}: no signing key yet; run `sonate keys generate`\n"
    assert main(["keys", "list", "--keyring", str(tmp_path / "ring.json")]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith("sonate: --keyring needs --key-file")


def test_python_m_proxy_is_sonate_and_parsing_loads_no_heavy_module() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = sonate("ledger", "reindex", "--page", "0", "--ledger", "x", timeout=60, env=env)
    assert (done.returncode, done.stdout, done.stderr) == (EXIT_USAGE, "", "sonate: --page must be >= 1\n")

    probe = ("import sys; from proxy.cli import build_parser; build_parser(); "
             f"print(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env,
                            cwd=ROOT)
    assert (loaded.returncode, loaded.stdout) == (0, "[]\n"), loaded.stderr


@pytest.mark.parametrize("broken", ["key", "policy"])
def test_serve_stops_on_a_bad_key_or_policy_before_the_serving_modules_load(tmp_path: Path, broken: str) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    key_file = tmp_path / "signing-key.json"
    if broken == "key":
        key_file.write_text("not a key")
        key_file.chmod(0o600)
        problem = f"{key_file}: cannot read signing key file"
    else:
        privacy = policies / "privacy.yaml"
        privacy.write_text(privacy.read_text().replace("restore_in_answer: true", "restore_in_answer: maybe"))
        problem = f"{privacy}: privacy.restore_in_answer: Input should be a valid boolean"
    config = tmp_path / "config.yaml"
    config.write_text(f"model_list: [{{model_name: demo, litellm_params: {{model: openai/demo, api_key: x}}}}]\n"
                      f"policies: {policies}\nledger: {{url: 'sqlite:///{tmp_path / 'ledger.db'}'}}\n"
                      f"signing: {{key_file: {key_file}}}\n"
                      "auth: {keys: [{key: sk-test-client-0001-padded-to-32-chars, actor: alice, role: client}]}\n")
    probe = ("import sys; from proxy.cli import main; code = main(['serve', '--config', sys.argv[1]]); "
             f"print(code, sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe, str(config)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert done.stdout == f"{EXIT_USAGE} []\n", done.stderr
    assert done.stderr.startswith(f"sonate: cannot start:\n{problem}") and "Traceback" not in done.stderr


def test_a_named_command_is_parsed_without_importing_the_other_commands() -> None:
    assert [named_command(argv) for argv in (["serve"], ["--log-level", "DEBUG", "eval", "guardrails"],
                                             ["--log-level=ERROR", "keys"], ["-h", "serve"], ["--version"],
                                             ["--log", "DEBUG", "serve"], ["bogus"], [])] == \
        ["serve", "eval", "keys", None, None, None, None, None]
    argv = ["--log-level", "DEBUG", "serve", "--config", "c.yaml", "--port", "9"]
    assert vars(build_parser("serve").parse_args(argv)) == vars(build_parser().parse_args(argv))
    probe = ("import sys; from proxy.cli import build_parser, named_command; "
             "build_parser(named_command(['serve', '--config', 'c.yaml'])); "
             "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('proxy.')}))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert loaded.returncode == 0, loaded.stderr
    assert "evaluation" not in loaded.stdout and "cli" in loaded.stdout


def test_parser_keeps_the_global_flags() -> None:
    args = build_parser().parse_args(["--log-level", "DEBUG", "verify", "r.json", "--keys", "k.json"])
    assert (args.log_level, args.command, args.receipt, args.keys) == ("DEBUG", "verify", "r.json", "k.json")
