"""The siding.toml files the Kubernetes manifests ship in their ConfigMaps pass `siding
check-config --strict` with the environment the pod gives them, and the pod's grace period
covers their drain (deploy/kubernetes; the Go test in deploy/kubernetes/check checks that the
rendered ConfigMaps hold these very files)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from siding.cli.run import check_config
from siding.config import load_config

KUBERNETES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
CONFIGS = [
    KUBERNETES / "base" / "siding.toml",
    KUBERNETES / "overlays" / "spark-k8s" / "siding.toml",
]
SPARK_STOP_S = 30  # Spark's own stop after the drain (docs/deploy.md, "Kubernetes")


def pod_environment() -> dict[str, str]:
    """What the container's environment holds: the Secret's keys (secrets.env), the
    Deployment's plain env and the downward API's pod name and namespace."""
    secrets = (KUBERNETES / "base" / "secrets.env").read_text().splitlines()
    env = dict(line.split("=", 1) for line in secrets if line and not line.startswith("#"))
    return {**env, "KAFKA_BOOTSTRAP": "kafka:9093", "POD_NAME": "siding-0", "POD_NAMESPACE": "ns"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(KUBERNETES)))
def test_the_configmaps_siding_toml_passes_check_config(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the pod's environment
    for name, value in pod_environment().items():
        monkeypatch.setenv(name, value)
    # When siding check-config --strict reads the file the ConfigMap holds
    result = CliRunner().invoke(check_config, ["--strict", str(path)])
    # Then it is valid, with no warning, and no secret is printed
    assert result.exit_code == 0, result.output
    assert "ok: 1 route(s)" in result.output and "warning" not in result.output
    for secret in ("change-me-kafka-password", "change-me-control-token", "change-me-billing"):
        assert secret not in result.output
    config = load_config(path)
    assert config.control.listen == "0.0.0.0:9464"  # reachable by probes, Service, Prometheus


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(KUBERNETES)))
def test_the_grace_period_covers_the_drain_and_sparks_stop(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in pod_environment().items():
        monkeypatch.setenv(name, value)
    deployment = (KUBERNETES / "base" / "deployment.yaml").read_text()
    match = re.search(r"terminationGracePeriodSeconds: (\d+)", deployment)
    assert match is not None
    drain_s = max(route.drain_timeout_s for route in load_config(path).route)
    assert int(match.group(1)) >= drain_s + SPARK_STOP_S
