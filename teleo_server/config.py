"""Server settings: pydantic-settings from ``TELEO_*`` environment variables and an optional TOML file.

Precedence (highest first): keyword arguments, environment (``TELEO_PORT``, nested with ``__``:
``TELEO_EMBEDDING__TRITON_URL``), the TOML file named by ``TELEO_CONFIG`` (or ``--config``), defaults.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from teleo_server.errors import InvalidArgument
from teleo_server.paths import default_data_dir, default_token_file


# The TOML file given to load_settings(); TELEO_CONFIG is read when none is.
_config_file: ContextVar[str | None] = ContextVar("teleo_config_file", default=None)


class Limits(BaseModel):
    """Bounds on request sizes; anything past them is INVALID_ARGUMENT (or RESOURCE_EXHAUSTED)."""

    max_content_bytes: int = Field(64 * 1024, ge=1)
    max_query_bytes: int = Field(8 * 1024, ge=1)
    max_top_k: int = Field(1000, ge=1)
    max_batch_items: int = Field(10_000, ge=1)
    max_ids: int = Field(1000, ge=1)
    max_metadata_entries: int = Field(64, ge=0)
    max_metadata_key_chars: int = Field(128, ge=1)
    max_metadata_value_bytes: int = Field(4096, ge=1)
    max_links: int = Field(64, ge=0)
    max_string_chars: int = Field(512, ge=1)
    # Retrievals being computed (embedding and pipeline) at once; more are refused at once, before
    # any work is spent on them.
    max_concurrent_retrieves: int = Field(64, ge=1)
    # Retrieve streams open at once, also those whose results are computed and only wait for the
    # client to read them; in all, and per token.
    max_open_streams: int = Field(1024, ge=1)
    max_streams_per_token: int = Field(32, ge=1)
    # A stream whose client reads nothing for this long is cancelled.
    write_stall_seconds: float = Field(10.0, gt=0)
    # Calls of any kind in flight at once; past it gRPC itself refuses (RESOURCE_EXHAUSTED) before
    # any Python runs, so a flood costs the server almost nothing.
    max_concurrent_rpcs: int = Field(2048, ge=1)
    # How many nice steps below the event loop the embedding and index worker threads run (Linux),
    # so that under a burst of calls accepting and refusing them is not starved by computation.
    worker_nice: int = Field(10, ge=0, le=19)


class TLSSettings(BaseModel):
    cert_file: Path | None = None
    key_file: Path | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> "TLSSettings":
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("set both tls.cert_file and tls.key_file, or neither")
        for p in (self.cert_file, self.key_file):
            if p is not None and not p.is_file():
                raise ValueError(f"TLS file {p} does not exist")
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


class CheckpointSettings(BaseModel):
    """While serving, write a new index snapshot once the database's change journal lists more
    memories as changed since the last one than ``share`` of those indexed (and at least
    ``min_changes``), at most once every ``seconds``: a crash then re-indexes at most about that
    many at the next start (teleo_server/snapshot.py). ``share`` 0 turns it off (a snapshot is
    then written at a clean stop only).

    With ``fork`` (the default where the platform forks and gRPC's fork handlers are off, as
    ``teleo serve`` runs), a forked copy of the server writes it: the index thread is held only
    while the copy is made (17 ms at 100,000 memories on a 2-core CPU), and serving goes on, but
    the copy holds its own copy of every page either process changes while it writes (up to about
    5 KB a memory). Without, the index thread writes it and retrievals wait (0.2-0.4 s for 5,183
    SciFact abstracts, about 4.3 s at 100,000 memories)."""

    share: float = Field(0.1, ge=0)
    min_changes: int = Field(1000, ge=1)
    seconds: float = Field(600.0, ge=0)
    fork: bool = True


class MetricsSettings(BaseModel):
    """Prometheus ``/metrics`` over HTTP on a port of its own; off while ``port`` is unset."""

    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=0, le=65535)  # 0 = any free port (tests)

    @property
    def enabled(self) -> bool:
        return self.port is not None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TELEO_", env_nested_delimiter="__", extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(50051, ge=0, le=65535)  # 0 = any free port (tests)
    data_dir: Path = Field(default_factory=default_data_dir)
    backend: Literal["auto", "numpy", "cupy"] = "auto"
    auth: bool = True  # False only for local experiments: every caller is an all-namespace admin
    create_dev_token: bool = True  # on first start with an empty token table
    dev_token_file: Path = Field(default_factory=default_token_file)
    debug: bool = False  # logs may then contain query text
    log_format: Literal["json", "console"] = "json"
    grace_seconds: float = Field(5.0, ge=0)
    embedder_check_seconds: float = Field(2.0, gt=0)  # how often health re-checks the embedder
    store_check_seconds: float = Field(1.0, gt=0)  # how often health re-checks that writes can succeed
    index_probe_seconds: float = Field(10.0, gt=0)  # health `index` fails when the index thread takes longer to answer
    maintenance_seconds: float = Field(0.5, gt=0)  # how often index upkeep (goals, calibration, compaction) looks for work
    # NumPy's request for transparent huge pages on large arrays: off, because the kernel then fills
    # whole 2 MB pages around partly written index buffers in the background (teleo_server/heap.py)
    huge_pages: bool = False
    # Threads each BLAS operation may use (the OpenBLAS that NumPy and SciPy bundle); 0 keeps the
    # library's default of one per core. Queries already run side by side (teleo_server/blas.py).
    blas_threads: int = Field(1, ge=0)
    # Before reporting SERVING, store a fixed sample in a scratch index and query it, so that the
    # first caller does not pay for the text analysers' tables (teleo_server/core.py: warm_up);
    # off starts a little sooner and leaves that cost to the first Store and Retrieve.
    warm_up: bool = True
    # At a clean stop, write the in-memory indexes beside the database (``index.snapshot``) and read
    # them back at the next start instead of rebuilding them from every memory (teleo_server/snapshot.py);
    # off rebuilds at every start. Host (numpy) backend only.
    index_snapshot: bool = True
    checkpoint: CheckpointSettings = Field(default_factory=CheckpointSettings)
    limits: Limits = Field(default_factory=Limits)
    tls: TLSSettings = Field(default_factory=TLSSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    plugins: list[str] = Field(default_factory=list)  # modules imported at start (teleo_server.plugins)
    embedding: dict[str, Any] = Field(default_factory=dict)  # validated by embedding.settings
    pipeline: dict[str, Any] = Field(default_factory=dict)  # validated by pipeline.settings

    @field_validator("data_dir", "dev_token_file", mode="after")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return v.expanduser()

    @property
    def db_path(self) -> Path:
        return self.data_dir / "teleo.db"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml = _config_file.get() or os.environ.get("TELEO_CONFIG")
        if toml:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml))
        return tuple(sources)


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Build Settings, turning validation errors into one message a person can act on."""
    config_file = config_file or os.environ.get("TELEO_CONFIG")
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise InvalidArgument(f"config file {path} does not exist", field="config")
    reset = _config_file.set(str(config_file) if config_file else None)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise invalid_configuration(exc) from exc
    finally:
        _config_file.reset(reset)


def invalid_configuration(exc: ValidationError, section: tuple[str, ...] = ()) -> InvalidArgument:
    """A settings validation error as one message naming each setting and its variable.

    section: where the validated model sits in Settings (("pipeline",) for PipelineSettings).
    """
    lines = []
    for err in exc.errors():
        path = (*section, *(str(p) for p in err["loc"]))
        loc = ".".join(path) or "settings"
        env = "TELEO_" + "__".join(p.upper() for p in path)
        lines.append(f"  {loc} (env {env}): {err['msg']}")
    return InvalidArgument("invalid configuration:\n" + "\n".join(lines))


__all__ = [
    "CheckpointSettings",
    "Limits",
    "MetricsSettings",
    "Settings",
    "TLSSettings",
    "default_data_dir",
    "default_token_file",
    "invalid_configuration",
    "load_settings",
]
