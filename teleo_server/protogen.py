"""Regenerate the Python protobuf/gRPC code from ``protos/``.

Run ``python -m teleo_server.protogen`` after editing a ``.proto`` file. Output goes to
``teleo_server/_proto/teleo/v1`` and is importable as ``teleo.v1`` (see ``package-dir`` in
pyproject.toml). ``tests/test_protos.py`` regenerates into a temporary folder and fails on drift.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "protos"
OUT_ROOT = REPO / "teleo_server" / "_proto"


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.rglob("*.proto"))


def generate(out_root: Path = OUT_ROOT) -> list[Path]:
    """Write generated modules under ``out_root``; returns the files written."""
    import grpc_tools
    from grpc_tools import protoc

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    out_root.mkdir(parents=True, exist_ok=True)
    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *files,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    written = []
    for pkg in {p.parent for p in proto_files()}:
        rel = pkg.relative_to(PROTO_ROOT)
        # protoc writes no __init__.py; each level of the package needs one.
        for i in range(1, len(rel.parts) + 1):
            init = out_root.joinpath(*rel.parts[:i], "__init__.py")
            if not init.exists():
                init.write_text("")
    for path in sorted(out_root.rglob("*")):
        if path.is_file() and path.suffix in {".py", ".pyi"}:
            written.append(path)
    return written


if __name__ == "__main__":
    for f in generate():
        print(f.relative_to(REPO))
    sys.exit(0)


__all__ = ["OUT_ROOT", "PROTO_ROOT", "REPO", "generate", "proto_files"]
