"""Start and stop a real ``tritonserver`` (from the ``nvidia-pytriton`` wheel) on this machine.

    python -m teleo_server.embedding.triton_launcher [--triton-venv .venv-triton] \
        [--model-repository triton_models] [--http-port 8000 --grpc-port 8001 --metrics-port 8002]

``make triton`` runs this in the foreground; the integration tests use :class:`TritonServer` with
free ports. ``nvidia-pytriton`` lives in its own venv (it pins protobuf and numpy < 2), and the
models run in that same venv (``make triton-env`` adds onnxruntime, tokenizers and this package
there): the wheel's python stub is compiled against the numpy 1 C API, and under numpy 2 it
corrupts every BYTES tensor it hands to Python (each byte replaced by the first). The model
environment's ``bin`` goes first on the server's PATH, which is how the stub finds its
``sys.prefix`` (it ignores PYTHONPATH), and its interpreter's LIBDIR goes on LD_LIBRARY_PATH so
the stub loads that libpython.

Stopping is thorough because a killed server leaves its python stubs running (re-parented to
PID 1) and their ``/dev/shm`` regions behind: every server gets a unique shm prefix, and
:meth:`TritonServer.stop` kills the process group, then any process whose command line names
the prefix, then removes the regions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import structlog

from teleo_server.embedding.repository import default_model_dir
from teleo_server.plugins import ENV as PLUGINS_ENV
from teleo_server.plugins import loaded

log = structlog.get_logger(__name__)

SHM_DIR = Path("/dev/shm")
INSTALL_HINT = ("python -m venv .venv-triton && .venv-triton/bin/pip install "
                "nvidia-pytriton==0.7.0   (or: make triton-env)")


def default_triton_venv() -> Path:
    return default_model_dir().parent / ".venv-triton"


@dataclass(frozen=True, slots=True)
class TritonInstall:
    """The pieces of ``nvidia-pytriton`` inside a venv."""

    site_packages: Path

    @property
    def venv(self) -> Path:
        return self.site_packages.parents[2]

    @property
    def root(self) -> Path:
        return self.site_packages / "pytriton" / "tritonserver"

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def libs(self) -> Path:
        return self.site_packages / "nvidia_pytriton.libs"

    def stub(self, version: tuple[int, int]) -> Path:
        return (self.root / "python_backend_stubs" / f"{version[0]}.{version[1]}"
                / "triton_python_backend_stub")

    @classmethod
    def find(cls, venv: Path) -> TritonInstall:
        """Raises FileNotFoundError (with an install hint) when the venv has no tritonserver."""
        for sp in sorted(venv.resolve().glob("lib/python3*/site-packages")):
            install = cls(sp)
            if install.binary.is_file():
                return install
        raise FileNotFoundError(f"no tritonserver in {venv}; install it: {INSTALL_HINT}")


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free on ``host`` now: each socket stays bound until all are chosen, so
    the kernel cannot hand the same port out twice (Triton refuses to start when two of its
    services share one)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]


# what tritonserver's log says when a port it was given is not usable: taken by another process
# since it was picked, or shared by two of its services
_PORT_TROUBLE = ("already in use", "cannot listen")
PORT_RETRIES = 2


class TritonServer:
    """One ``tritonserver`` process serving a model repository.

    Parameters
    ----------
    install : where the binary and backend come from.
    model_repository : a materialised ``triton_models/``.
    host : bind address for HTTP, gRPC and metrics (loopback by default).
    http_port, grpc_port, metrics_port : 0 picks a free port.
    exit_timeout_s : how long Triton drains in-flight requests after SIGTERM.
    model_env : the venv the python models run in; None = the venv ``install`` lives in.
    """

    def __init__(self, install: TritonInstall, model_repository: Path, *,
                 host: str = "127.0.0.1", http_port: int = 0, grpc_port: int = 0,
                 metrics_port: int = 0, exit_timeout_s: int = 5,
                 model_env: Path | None = None) -> None:
        self.install = install
        self.model_env = (model_env or install.venv).resolve()
        self.model_repository = model_repository.resolve()
        self.host = host
        # ports left to us are picked here, and picked again should one be taken before Triton binds it
        self._own_ports = not (http_port or grpc_port or metrics_port)
        ports = (http_port, grpc_port, metrics_port)
        given = {p for p in ports if p}
        wanted = sum(not p for p in ports)
        chosen = free_ports(wanted, host) if wanted else []
        for _ in range(8):  # a port the caller gave is not handed to another service
            if not given & set(chosen):
                break
            chosen = free_ports(wanted, host)
        picked = iter(chosen)
        self.http_port = http_port or next(picked)
        self.grpc_port = grpc_port or next(picked)
        self.metrics_port = metrics_port or next(picked)
        self.exit_timeout_s = exit_timeout_s
        self.shm_prefix = f"teleo_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.proc: subprocess.Popen | None = None
        self._workdir: Path | None = None
        self.log_path: Path | None = None
        self._log_offset = 0  # where this run's lines start in log_path

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    def _backend_dir(self, workdir: Path) -> Path:
        # symlinks keep the stub's RPATH (relative to its real location) working
        backend = workdir / "backends" / "python"
        backend.mkdir(parents=True)
        src = self.install.root / "backends" / "python"
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            (backend / name).symlink_to(src / name)
        version, _ = self._model_python()
        stub = self.install.stub(version)
        if not stub.is_file():
            raise FileNotFoundError(f"nvidia-pytriton has no python stub for Python {version}")
        (backend / "triton_python_backend_stub").symlink_to(stub)
        return workdir / "backends"

    def _model_python(self) -> tuple[tuple[int, int], str]:
        """(major, minor) and LIBDIR of the model environment's interpreter."""
        python = self.model_env / "bin" / "python"
        if not python.exists():
            raise FileNotFoundError(f"no Python in model environment {self.model_env}")
        out = subprocess.run(
            [str(python), "-c", "import sys, sysconfig; print(sys.version_info[0], "
             "sys.version_info[1], sysconfig.get_config_var('LIBDIR') or '')"],
            check=True, capture_output=True, text=True).stdout.split()
        return (int(out[0]), int(out[1])), (out[2] if len(out) > 2 else "")

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        _, libdir = self._model_python()
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(self.install.libs), libdir, env.get("LD_LIBRARY_PATH", "")) if p)
        env["PATH"] = os.pathsep.join([str(self.model_env / "bin"), env.get("PATH", "")])
        if loaded():  # the models compute the same Python heads as this process
            env[PLUGINS_ENV] = json.dumps(loaded())
        env.pop("VIRTUAL_ENV", None)
        env.pop("PYTHONPATH", None)
        return env

    def command(self, backend_dir: Path) -> list[str]:
        return [
            str(self.install.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backend_dir}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
            f"--http-address={self.host}", f"--http-port={self.http_port}",
            f"--grpc-address={self.host}", f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}", f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",
            f"--exit-timeout-secs={self.exit_timeout_s}",
        ]

    def start(self, *, log_to: Path | None = None) -> None:
        """Spawn the server in its own process group; ``log_to`` None inherits stdout/stderr."""
        self._workdir = Path(tempfile.mkdtemp(prefix="teleo-triton-"))
        cmd = self.command(self._backend_dir(self._workdir))
        self.log_path = log_to
        self._log_offset = log_to.stat().st_size if log_to is not None and log_to.exists() else 0
        out = log_to.open("ab") if log_to is not None else None
        try:
            self.proc = subprocess.Popen(cmd, env=self._env(), stdout=out,
                                         stderr=subprocess.STDOUT if out else None,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            if out is not None:
                out.close()
        log.info("triton.started", pid=self.proc.pid, grpc=self.grpc_url,
                 http_port=self.http_port, repository=str(self.model_repository))

    def ready(self) -> bool:
        url = f"http://{self.host}:{self.http_port}/v2/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Poll readiness; raises RuntimeError (with the start of this run's log and its tail) on
        exit or deadline. When this server picked its own ports and Triton exits because one of
        them was taken meanwhile, it starts again on fresh ports (``PORT_RETRIES`` times at most)."""
        deadline = time.monotonic() + timeout_s
        retries = PORT_RETRIES
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                text = self.log_tail()
                if retries and self._own_ports and self.proc is not None and any(t in text for t in _PORT_TROUBLE):
                    retries -= 1
                    log.warning("triton.port_taken", http_port=self.http_port, grpc_port=self.grpc_port,
                                metrics_port=self.metrics_port)
                    self.stop(grace_s=0)  # the exited run's stubs, shared memory and directory
                    self.http_port, self.grpc_port, self.metrics_port = free_ports(3, self.host)
                    self.start(log_to=self.log_path)
                    continue
                raise RuntimeError(f"tritonserver exited before ready\n{text}")
            if self.ready():
                log.info("triton.ready", grpc=self.grpc_url)
                return
            time.sleep(0.2)
        raise RuntimeError(f"tritonserver not ready after {timeout_s} s\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000, head: int = 1000) -> str:
        """This run's log (since the last ``start``): its first ``head`` characters and its last
        ``chars`` (a failure's cause can be at either end: an option Triton refuses is printed
        after its usage text, an error while loading a model before the long shutdown)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_bytes()[self._log_offset:].decode(errors="replace")
        if len(text) <= head + chars:
            return text
        return f"{text[:head]}\n[... {len(text) - head - chars} characters ...]\n{text[-chars:]}"

    def kill_server(self, sig: int = signal.SIGKILL) -> None:
        """Signal the tritonserver process alone (a crash, as far as clients can tell)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stub_pids(self) -> list[int]:
        """Live processes whose command line names this server's shm prefix (its stubs)."""
        pids = []
        needle = self.shm_prefix.encode()
        server_pid = self.proc.pid if self.proc is not None else -1
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in cmdline and state != "Z" and int(entry.name) != server_pid:
                pids.append(int(entry.name))
        return pids

    def shm_regions(self) -> list[Path]:
        return sorted(SHM_DIR.glob(f"{self.shm_prefix}*")) if SHM_DIR.is_dir() else []

    def stop(self, grace_s: float | None = None) -> None:
        """SIGTERM the group, SIGKILL what is left, reap stubs and shm regions. Idempotent."""
        grace = self.exit_timeout_s + 2 if grace_s is None else grace_s
        if self.proc is not None:
            pgid = self.proc.pid  # start_new_session made the server its group leader
            if self.proc.poll() is None:
                _signal_group(pgid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    log.warning("triton.stop_timeout", pid=pgid, grace_s=grace)
            _signal_group(pgid, signal.SIGKILL)
            self.proc.wait()
        for pid in self.stub_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5.0
        while self.stub_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        for region in self.shm_regions():
            region.unlink(missing_ok=True)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        log.info("triton.stopped", shm_prefix=self.shm_prefix)

    def __enter__(self) -> TritonServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run tritonserver with Teleo's models.")
    parser.add_argument("--triton-venv", type=Path, default=default_triton_venv())
    parser.add_argument("--model-repository", type=Path, default=default_model_dir())
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    args = parser.parse_args(argv)
    try:
        install = TritonInstall.find(args.triton_venv)
    except FileNotFoundError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    server = TritonServer(install, args.model_repository, host=args.host,
                          http_port=args.http_port, grpc_port=args.grpc_port,
                          metrics_port=args.metrics_port)
    stopping = False

    def on_signal(signum, _frame):
        nonlocal stopping
        stopping = True
        log.info("triton.signal", signal=signal.Signals(signum).name)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server.start()
    try:
        while not stopping and server.proc is not None and server.proc.poll() is None:
            time.sleep(0.2)
        return 0 if stopping else (server.proc.returncode if server.proc else 1)
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "INSTALL_HINT",
    "SHM_DIR",
    "TritonInstall",
    "TritonServer",
    "default_triton_venv",
    "free_port",
    "free_ports",
    "main",
]
