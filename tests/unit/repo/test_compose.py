"""deploy/docker-compose.yml is a valid Compose file: what ``docker compose config`` checks
without a Docker engine.

The file is validated against the Compose Specification's JSON schema (vendored under
tests/data/compose-spec/, pinned by sha256), then the references the schema cannot see are
resolved: the build context holds the Dockerfile, every bind-mounted path exists beside the
compose file, every named volume is declared, every ``depends_on`` names a service, and the
three keys are required from the environment (``${VAR:?message}``), never written in the file.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = ROOT / "deploy" / "docker-compose.yml"
SCHEMA = ROOT / "tests" / "data" / "compose-spec" / "compose-spec.json"
SCHEMA_SHA256 = "73ca5878c77570ba222a558016c7b3c6770ba5f3377786593e32180666512f8f"
KEYS = ("SONATE_CLIENT_KEY", "SONATE_ADMIN_KEY", "SONATE_METRICS_KEY")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_the_vendored_schema_is_the_pinned_one():
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256


def test_the_compose_file_conforms_to_the_compose_specification(compose):
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_the_schema_rejects_a_misspelt_service_key(compose):
    """The check above can fail: the schema refuses keys the specification does not define."""
    broken = {**compose, "services": {**compose["services"], "proxy": {**compose["services"]["proxy"], "port": ["8080"]}}}
    assert not jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).is_valid(broken)


def _bind_sources(service: dict) -> list[str]:
    sources = []
    for volume in service.get("volumes", []):
        source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source", "")
        sources.append(source)
    return sources


def test_build_context_bind_mounts_volumes_and_dependencies_resolve(compose):
    services, declared = compose["services"], set(compose.get("volumes") or {})
    build = services["proxy"]["build"]
    context = (COMPOSE.parent / (build if isinstance(build, str) else build["context"])).resolve()
    assert (context / "Dockerfile").is_file() and context == ROOT
    for name, service in services.items():
        for source in _bind_sources(service):
            if source.startswith((".", "/")):
                assert (COMPOSE.parent / source).exists(), f"{name}: bind mount {source} does not exist"
            else:
                assert source in declared, f"{name}: named volume {source} is not declared"
        depends = service.get("depends_on", [])
        assert set(depends) <= set(services), f"{name}: depends_on names an unknown service"


def test_the_proxy_requires_its_keys_from_the_environment(compose):
    environment = compose["services"]["proxy"]["environment"]
    for name in KEYS:
        assert re.fullmatch(rf"\$\{{{name}:\?[^}}]+\}}", environment[name]), environment[name]
    assert compose["services"]["proxy"]["ports"] == ["127.0.0.1:8080:8080"]
