"""Settings come from TELEO_* variables and a TOML file, with errors a person can act on."""

from __future__ import annotations

import pytest

from teleo_server.config import load_settings
from teleo_server.errors import InvalidArgument


def test_environment_and_nested_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("TELEO_PORT", "6000")
    monkeypatch.setenv("TELEO_LIMITS__MAX_TOP_K", "50")
    s = load_settings(data_dir=tmp_path)
    assert s.port == 6000 and s.limits.max_top_k == 50 and s.db_path == tmp_path / "teleo.db"


def test_toml_file_is_read_and_env_wins(monkeypatch, tmp_path):
    cfg = tmp_path / "teleo.toml"
    cfg.write_text('port = 7000\nhost = "0.0.0.0"\n[limits]\nmax_ids = 5\n')
    monkeypatch.setenv("TELEO_HOST", "127.0.0.2")
    monkeypatch.delenv("TELEO_CONFIG", raising=False)
    s = load_settings(cfg)
    assert (s.port, s.host, s.limits.max_ids) == (7000, "127.0.0.2", 5)


def test_invalid_values_name_the_setting_and_its_variable(monkeypatch):
    monkeypatch.setenv("TELEO_PORT", "99999")
    with pytest.raises(InvalidArgument) as err:
        load_settings()
    assert "TELEO_PORT" in str(err.value) and "port" in str(err.value)


def test_unknown_keys_and_missing_files_are_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("TELEO_CONFIG", raising=False)
    with pytest.raises(InvalidArgument, match="does not exist"):
        load_settings(tmp_path / "nope.toml")
    cfg = tmp_path / "bad.toml"
    cfg.write_text("prot = 1\n")
    with pytest.raises(InvalidArgument, match="prot"):
        load_settings(cfg)


def test_tls_needs_both_files(tmp_path, monkeypatch):
    monkeypatch.setenv("TELEO_TLS__CERT_FILE", str(tmp_path / "cert.pem"))
    with pytest.raises(InvalidArgument, match="tls"):
        load_settings()
