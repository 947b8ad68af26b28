"""The Triton launcher's own bookkeeping, without a tritonserver: distinct ports, and a log that
shows both ends of this run's output."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from teleo_server.embedding.triton_launcher import TritonServer, free_ports


def test_ports_picked_together_are_distinct():
    ports = free_ports(64)
    assert len(set(ports)) == 64 and all(0 < p < 65536 for p in ports)


def test_ports_the_caller_gives_are_kept_and_only_the_others_picked(tmp_path, monkeypatch):
    from teleo_server.embedding import triton_launcher

    asked: list[int] = []

    def counting(n: int, host: str = "127.0.0.1") -> list[int]:
        asked.append(n)
        return free_ports(n, host)

    monkeypatch.setattr(triton_launcher, "free_ports", counting)
    install = SimpleNamespace(venv=tmp_path)
    given = TritonServer(install, tmp_path, http_port=18000, grpc_port=18001, metrics_port=18002)  # type: ignore[arg-type]
    assert (given.http_port, given.grpc_port, given.metrics_port) == (18000, 18001, 18002) and asked == []  # none picked
    one = TritonServer(install, tmp_path, grpc_port=18001)  # type: ignore[arg-type]
    assert one.grpc_port == 18001 and asked[-1] == 2
    assert len({one.http_port, one.grpc_port, one.metrics_port}) == 3


def _server(tmp_path: Path) -> TritonServer:
    install = SimpleNamespace(venv=tmp_path)  # only stored until start()
    srv = TritonServer(install, tmp_path)  # type: ignore[arg-type]
    assert len({srv.http_port, srv.grpc_port, srv.metrics_port}) == 3
    return srv


def test_the_log_shows_its_start_and_its_end(tmp_path):
    """Triton prints an option it refuses after a long usage text, and a model's load error before
    a long shutdown: what a failure reports keeps both ends of the run's log, and only this run's."""
    srv = _server(tmp_path)
    srv.log_path = tmp_path / "triton.log"
    srv.log_path.write_text("an earlier run's line\n")
    srv._log_offset = srv.log_path.stat().st_size  # what start() records
    with srv.log_path.open("a") as f:
        f.write("Usage: tritonserver [options]\n" + "  --option <value>\n" * 2000
                + "The server cannot listen to HTTP requests and GRPC requests at the same address\n")
    text = srv.log_tail()
    assert text.startswith("Usage: tritonserver")
    assert text.rstrip().endswith("at the same address")
    assert "earlier run" not in text and "characters ...]" in text
    assert len(text) < 6000
