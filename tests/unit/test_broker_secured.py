"""The embedded broker's opt-in SASL_SSL listener: its settings, its users and its certificates
(the broker itself runs in tests/e2e/test_secured_kafka.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from siding.devkit.broker import SaslUser, SecuredListener, sasl_ssl_properties, server_properties
from siding.devkit.certs import make_tls_files, server_extensions
from siding.errors import BrokerError


def test_the_default_broker_has_only_the_plaintext_listener() -> None:
    props = server_properties(1, 9092, 9093, Path("/log"), {})
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert not any("sasl" in key or "ssl" in key for key in props)


def test_a_secured_broker_adds_a_sasl_ssl_listener_and_keeps_plaintext_between_its_parts() -> None:
    props = server_properties(1, 9092, 9093, Path("/log"), {}, secure_port=9094)
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093"
    )
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094"
    assert "SASL_SSL:SASL_SSL" in props["listener.security.protocol.map"].split(",")
    assert props["inter.broker.listener.name"] == "PLAINTEXT"


def test_the_secured_listener_takes_scram_and_plain_with_a_pem_keystore() -> None:
    users = (SaslUser("alice", "a-1"), SaslUser("bob", "b_2"))
    props = sasl_ssl_properties(Path("/tls/keystore.pem"), users)
    prefix = "listener.name.sasl_ssl."
    assert props[f"{prefix}sasl.enabled.mechanisms"] == "SCRAM-SHA-512,PLAIN"
    assert props[f"{prefix}ssl.keystore.type"] == "PEM"
    assert props[f"{prefix}ssl.keystore.location"] == "/tls/keystore.pem"
    assert props[f"{prefix}plain.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        ' user_alice="a-1" user_bob="b_2";'
    )
    assert props[f"{prefix}scram-sha-512.sasl.jaas.config"].endswith("ScramLoginModule required;")


@pytest.mark.parametrize(("name", "password"), [("a b", "pw"), ("alice", 'p"w'), ("", "pw")])
def test_user_names_and_passwords_the_broker_settings_cannot_carry_are_refused(
    name: str, password: str
) -> None:
    with pytest.raises(BrokerError) as caught:
        SaslUser(name, password)
    assert password not in str(caught.value)


def test_a_password_never_shows_in_a_users_repr_and_a_listener_needs_users() -> None:
    assert "s3cret" not in repr(SaslUser("alice", "s3cret"))
    with pytest.raises(BrokerError, match="at least one"):
        SecuredListener()


def test_server_certificates_name_ips_and_hosts() -> None:
    assert server_extensions(("127.0.0.1", "localhost", "::1")).splitlines()[0] == (
        "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:::1"
    )


def test_the_broker_certificate_is_signed_by_the_ca_for_loopback(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)
    # OpenSSL itself checks the chain, the purpose and the address
    verify = ["openssl", "verify", "-CAfile", str(files.ca), "-purpose", "sslserver"]
    done = subprocess.run(
        [*verify, "-verify_ip", "127.0.0.1", str(tmp_path / "broker.pem")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    keystore = files.keystore.read_text()
    # Kafka's PEM keystore: an unencrypted PKCS#8 key, then the chain
    assert keystore.startswith("-----BEGIN PRIVATE KEY-----")
    assert keystore.count("-----BEGIN CERTIFICATE-----") == 2
    assert files.keystore.stat().st_mode & 0o077 == 0
