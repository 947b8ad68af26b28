"""Optional TLS: with a certificate and key configured, the server speaks only TLS."""

from __future__ import annotations

import shutil
import subprocess

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests._server import InThreadServer

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")]


def test_tls_server_accepts_tls_and_refuses_plaintext(tmp_path):
    from teleo_server.config import Settings

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    settings = Settings(port=0, data_dir=tmp_path / "data", dev_token_file=tmp_path / "token", tls={"cert_file": cert, "key_file": key})
    srv = InThreadServer.start(settings)
    try:
        creds = grpc.ssl_channel_credentials(cert.read_bytes())
        with grpc.secure_channel(srv.address, creds) as ch:
            status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status
            assert status == health_pb2.HealthCheckResponse.SERVING
        from teleo_server.client import Client, ClientError

        with Client(f"localhost:{srv.address.rsplit(':', 1)[1]}", token=srv.token, ca_cert=cert) as client:
            assert client.stats().embedder_ready is not None and client.health() == "SERVING"
        with Client(srv.address, token=srv.token, timeout=3) as plain, pytest.raises(ClientError) as refused:
            plain.health(timeout=3)
        assert refused.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
        with grpc.insecure_channel(srv.address) as ch, pytest.raises(grpc.RpcError) as err:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=3)
        assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        srv.stop()
