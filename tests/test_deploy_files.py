"""The Dockerfile, compose file and README agree (Docker itself cannot run on the CI machines).

The images cannot be built here, so their build steps are replayed outside Docker: the files each
Dockerfile COPYs (after `.dockerignore`) are laid out as the image's WORKDIR, and its `pip install`
of this project is run there offline (--no-deps, --no-build-isolation, --no-index), plus a full
wheel build. A path the package needs but the Dockerfile does not copy fails the test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

from tests._server import REPO

README = (REPO / "README.md").read_text()
DOCKERFILE = (REPO / "Dockerfile").read_text()
COMPOSE = (REPO / "deploy" / "compose.yaml").read_text()
TRITON_DOCKERFILE = (REPO / "deploy" / "triton.Dockerfile").read_text()
DOCKERFILES = {"Dockerfile": DOCKERFILE, "deploy/triton.Dockerfile": TRITON_DOCKERFILE}
DOCKERIGNORE = (REPO / ".dockerignore").read_text() if (REPO / ".dockerignore").is_file() else ""


def test_triton_image_tag_in_readme_is_the_one_deployed():
    tags = set(re.findall(r"nvcr\.io/nvidia/tritonserver:[\w.-]+", README))
    assert tags, "README names no Triton image"
    assert tags == set(re.findall(r"nvcr\.io/nvidia/tritonserver:[\w.-]+", TRITON_DOCKERFILE))


def test_readme_commands_name_files_that_exist():
    for path in re.findall(r"docker compose -f (\S+)", README):
        assert (REPO / path).is_file(), path
    for target in re.findall(r"^make (\w[\w-]*)", README, flags=re.M):
        assert re.search(rf"^{target}:", (REPO / "Makefile").read_text() + "".join(p.read_text() for p in (REPO / "mk").glob("*.mk")), re.M), target


def test_image_is_gpu_ready_non_root_and_probed_by_teleo_health():
    assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:12[\w.-]+-runtime", DOCKERFILE, re.M)
    assert re.search(r"^FROM \$\{CUDA_IMAGE\}", DOCKERFILE, re.M)
    # the extra follows the image's CUDA major
    assert "extra=gpu " in DOCKERFILE and '[ "${CUDA_VERSION%%.*}" = 13 ]; then extra=gpu-cuda13; fi' in DOCKERFILE
    assert '-e ".[$extra,e5]"' in DOCKERFILE
    installs = [a for run in re.findall(r"^RUN ((?:.*\\\n)*.*)", DOCKERFILE, re.M) for a in project_pip_installs(run)]
    assert sorted(w for a in installs for w in a if PROJECT_SPEC.match(w)) == [".[gpu,e5]", ".[gpu-cuda13,e5]"]
    user = re.findall(r"^USER (\S+)", DOCKERFILE, re.M)
    assert user and user[-1] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK .*\n?.*teleo\", \"health", DOCKERFILE, re.M)


def test_gpu_extra_installs_cupy_and_cuvs():
    pyproject = (REPO / "pyproject.toml").read_text()
    gpu = re.search(r"^gpu = \[(.*?)\]", pyproject, re.M | re.S).group(1)
    assert "cupy-cuda12x" in gpu and "cuvs-cu12" in gpu
    gpu13 = re.search(r"^gpu-cuda13 = \[(.*?)\]", pyproject, re.M | re.S).group(1)
    assert "cupy-cuda13x" in gpu13 and "cuvs-cu13" in gpu13


def test_compose_serves_the_checkout_repository_on_gpus():
    assert "../triton_models:/models" in COMPOSE
    assert "--model-config-name=gpu" in COMPOSE
    assert "TELEO_EMBEDDING__TRITON_URL: triton:8001" in COMPOSE
    for gpu_config in (REPO / "triton_models").glob("*/configs/gpu.pbtxt"):
        assert "KIND_GPU" in gpu_config.read_text(), gpu_config


# --- reading Dockerfiles ---------------------------------------------------------------------------


@dataclass
class Stage:
    """One FROM stage: its instructions in order, each with the WORKDIR in force, and its ENV."""

    steps: list[tuple[str, str, str]] = field(default_factory=list)  # (INSTRUCTION, arguments, workdir)
    env: dict[str, str] = field(default_factory=dict)
    volumes: list[str] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # also inside a continuation, as Docker does
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        name, _, args = (pending + stripped).partition(" ")
        pending = ""
        out.append((name.upper(), args.strip()))
    return out


def env_words(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if words and "=" not in words[0]:  # legacy `ENV KEY value with spaces`
        return {words[0]: " ".join(words[1:])}
    return dict(w.split("=", 1) for w in words)


def stages(text: str) -> list[Stage]:
    result: list[Stage] = []
    workdir = "/"
    for name, args in instructions(text):
        if name == "FROM":
            result.append(Stage())
            workdir = "/"
            continue
        if not result:  # ARG before the first FROM
            continue
        stage = result[-1]
        if name == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, args))
        elif name == "ENV":
            stage.env.update(env_words(args))
        elif name == "VOLUME":
            stage.volumes += json.loads(args) if args.startswith("[") else args.split()
        stage.steps.append((name, args, workdir))
    return result


def copy_parts(args: str) -> tuple[dict[str, str], list[str], str]:
    """COPY/ADD arguments as (flags, sources, destination); handles --chown= and the JSON form."""
    flags: dict[str, str] = {}
    rest = args.strip()
    while rest.startswith("--"):
        flag, _, rest = rest.partition(" ")
        key, _, value = flag[2:].partition("=")
        flags[key] = value
        rest = rest.strip()
    words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
    return flags, words[:-1], words[-1]


def context_copies(text: str) -> list[str]:
    """Every path of the build context that a COPY or ADD of the Dockerfile reads."""
    sources = []
    for stage in stages(text):
        for name, args, _ in stage.steps:
            if name in ("COPY", "ADD"):
                flags, srcs, _ = copy_parts(args)
                if "from" not in flags:  # --from= copies from another stage or image, not the context
                    sources += [s for s in srcs if "://" not in s]
    return sources


class DockerIgnore:
    """`.dockerignore` as Docker reads it: Go filepath.Match patterns plus `**`, `!` exceptions, last
    match wins, and a pattern that matches a directory excludes everything below it."""

    def __init__(self, text: str) -> None:
        self.rules: list[tuple[bool, re.Pattern[str]]] = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pattern = posixpath.normpath(line.removeprefix("!").strip()).lstrip("/")
            self.rules.append((negate, re.compile(self._regex(pattern))))

    @staticmethod
    def _regex(pattern: str) -> str:
        out, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                out, i = out + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                out, i = out + ".*", i + 2
            elif pattern[i] == "*":
                out, i = out + "[^/]*", i + 1
            elif pattern[i] == "?":
                out, i = out + "[^/]", i + 1
            elif pattern[i] == "[" and "]" in pattern[i:]:
                j = pattern.index("]", i)
                out, i = out + "[" + pattern[i + 1:j].replace("!", "^", 1) + "]", j + 1
            elif pattern[i] == "\\" and i + 1 < len(pattern):
                out, i = out + re.escape(pattern[i + 1]), i + 2
            else:
                out, i = out + re.escape(pattern[i]), i + 1
        return out

    def excluded(self, rel: str) -> bool:
        parts = PurePosixPath(rel).parts
        candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        verdict = False
        for negate, rx in self.rules:
            if any(rx.fullmatch(c) for c in candidates):
                verdict = not negate
        return verdict


# --- replaying a build outside Docker ---------------------------------------------------------------

PROJECT_SPEC = re.compile(r"^\.(\[[\w,\s-]+\])?$")  # `.` or `.[gpu]`: this project, from WORKDIR


def project_pip_installs(command: str) -> list[list[str]]:
    """The arguments of each `pip install` in a RUN command that installs this project."""
    found = []
    parts = re.split(r"&&|\|\||;", command)
    # a variable the command assigns (`extra=gpu`, `then extra=gpu-cuda13`) stands for each value
    values: dict[str, list[str]] = {}
    for part in parts:
        for name, value in re.findall(r"(?:^|\s)(\w+)=([\w.-]+)(?=\s|$)", part):
            values.setdefault(name, []).append(value)
    for part in parts:
        words = shlex.split(part)
        for i, word in enumerate(words[:-1]):
            if PurePosixPath(word).name in ("pip", "pip3") and words[i + 1] == "install":  # also `-m pip`
                for args in _expand(words[i + 2:], values):
                    if any(PROJECT_SPEC.match(a) for a in args):
                        found.append(args)
                break
    return found


def _expand(args: list[str], values: dict[str, list[str]]) -> list[list[str]]:
    """``args`` once per value of the first assigned variable they name ($x or ${x})."""
    for name, options in values.items():
        pattern = re.compile(rf"\$(?:{name}\b|\{{{name}\}})")
        if any(pattern.search(a) for a in args):
            return [a for v in options for a in _expand([pattern.sub(v, w) for w in args], values)]
    return [args]


def offline_args(args: list[str]) -> list[str]:
    """The parts of a `pip install` that concern this project: -e, constraints files, `.[extras]`.
    Other requirements (fetched from an index) and network or cache options are left out."""
    keep: list[str] = []
    words = iter(args)
    for word in words:
        if word in ("-e", "--editable"):
            target = next(words)
            if PROJECT_SPEC.match(target):
                keep += ["-e", target]
        elif word in ("-c", "--constraint"):
            keep += ["-c", next(words)]
        elif word.startswith("--constraint="):
            keep.append(word)
        elif PROJECT_SPEC.match(word):
            keep.append(word)
    return keep


def copy_tree(src: Path, target: Path, ignore: DockerIgnore) -> None:
    for root, dirs, files in os.walk(src):
        rel_root = Path(root).relative_to(REPO)
        dirs[:] = [d for d in dirs if not ignore.excluded((rel_root / d).as_posix())]
        for name in files:
            if not ignore.excluded((rel_root / name).as_posix()):
                dest = target / Path(root).relative_to(src) / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(Path(root) / name, dest)


def lay_out(image: Path, args: str, workdir: str, ignore: DockerIgnore) -> None:
    """Carry out one COPY from the repository (the build context) into ``image``."""
    _, sources, dest = copy_parts(args)
    dest_abs = posixpath.join(workdir, dest)
    paths = []
    for source in sources:
        if "://" in source:  # ADD from a URL
            continue
        matches = sorted(REPO.glob(source)) if any(c in source for c in "*?[") else [REPO / source]
        assert matches and all(p.exists() for p in matches), f"COPY source {source} is not in the repository"
        paths += matches
    into_dir = dest.endswith("/") or len(paths) > 1
    for path in paths:
        rel = path.relative_to(REPO).as_posix()
        assert not ignore.excluded(rel), f"COPY source {rel} is excluded by .dockerignore"
        target = image / dest_abs.lstrip("/")
        if path.is_dir():
            copy_tree(path, target, ignore)
        else:
            target = target / path.name if into_dir else target
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def pip(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    return subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def replay_build(dockerfile: str, tmp: Path) -> list[Path]:
    """Lay out each stage's COPYs and run its `pip install` of this project there, offline.

    Each install runs as the Dockerfile writes it (-e, extras, constraints) with --dry-run, which
    prepares the package's metadata; a full `pip wheel` then builds it from the same files. Raises
    AssertionError with pip's output when either fails. Returns the wheels built.
    """
    ignore = DockerIgnore(DOCKERIGNORE)
    wheels: list[Path] = []
    installs = 0
    for n, stage in enumerate(stages(dockerfile)):
        image = tmp / f"stage{n}"
        for name, args, workdir in stage.steps:
            if name in ("COPY", "ADD") and "from" not in copy_parts(args)[0]:
                lay_out(image, args, workdir, ignore)
            elif name == "RUN":
                for pip_args in project_pip_installs(args):
                    installs += 1
                    cwd = image / workdir.lstrip("/")
                    assert cwd.is_dir(), f"WORKDIR {workdir} is empty when `pip install` runs"
                    run = pip("install", "--dry-run", "--no-deps", "--no-build-isolation", "--no-index",
                              *offline_args(pip_args), cwd=cwd)
                    assert run.returncode == 0, f"pip install {' '.join(pip_args)} fails:\n{run.stdout}\n{run.stderr}"
                    out = tmp / f"wheels{installs}"
                    run = pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), ".", cwd=cwd)
                    assert run.returncode == 0, f"building the wheel fails:\n{run.stdout}\n{run.stderr}"
                    wheels += sorted(out.glob("*.whl"))
    assert installs, "the Dockerfile installs no copy of this project"
    return wheels


def _backend_importable() -> bool:
    backend = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["build-backend"]
    return importlib.util.find_spec(backend.split(".")[0]) is not None


needs_build_backend = pytest.mark.skipif(
    not _backend_importable(), reason="the offline builds need the build backend (setuptools) installed here"
)


@needs_build_backend
@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_each_dockerfile_installs_this_project_from_the_files_it_copies(name: str, tmp_path: Path):
    wheels = replay_build(DOCKERFILES[name], tmp_path)
    assert wheels
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
        # both import names setup.py maps: the server and the generated protobuf package
        assert "teleo_server/server.py" in names and "teleo/v1/memory_pb2.py" in names, wheel.name
        # the data files the code reads beside itself
        assert {"teleo_server/pipeline/relevance.json", "teleo_server/extract/english_words.txt"} <= names, wheel.name


@needs_build_backend
def test_replay_fails_when_a_package_directory_is_not_copied(tmp_path: Path):
    without_kernels = "\n".join(
        line for line in TRITON_DOCKERFILE.splitlines() if not re.match(r"^COPY .*\bkernels\b", line)
    )
    assert without_kernels != TRITON_DOCKERFILE
    with pytest.raises(AssertionError, match="package directory 'kernels' does not exist"):
        replay_build(without_kernels, tmp_path)


def test_dockerignore_keeps_out_environments_and_keeps_what_is_copied():
    assert DOCKERIGNORE, ".dockerignore is missing"
    ignore = DockerIgnore(DOCKERIGNORE)
    for path in (".venv", ".venv/bin/python", ".venv-triton/lib/x.py", ".git/HEAD", "var/bench/x",
                 "tests/node/node_modules/x/index.js", "teleo_server/__pycache__/core.cpython-311.pyc",
                 "teleo.egg-info/PKG-INFO", "triton_models/minilm/1/model.onnx",
                 "triton_models/minilm/1/assets/tokenizer.json", "triton_models/MANIFEST.json"):
        assert ignore.excluded(path), path
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    files = [f for f in tracked.stdout.split("\0") if f]
    for name, text in DOCKERFILES.items():
        for source in context_copies(text):
            source = posixpath.normpath(source)
            assert not ignore.excluded(source), (name, source)
            under = [f for f in files if f == source or f.startswith(source.rstrip("/") + "/")]
            assert under, (name, source)
            assert not [f for f in under if ignore.excluded(f)], (name, source)


def test_data_volume_is_created_and_owned_by_the_runtime_user_before_user():
    stage = stages(DOCKERFILE)[-1]
    data_dir = stage.env["TELEO_DATA_DIR"]
    assert data_dir in stage.volumes
    users = [i for i, (name, _, _) in enumerate(stage.steps) if name == "USER"]
    assert users
    user = stage.steps[users[-1]][1].split(":")[0]
    before = " && ".join(args for name, args, _ in stage.steps[: users[-1]] if name == "RUN")
    commands = [shlex.split(c) for c in re.split(r"&&|;", before)]
    assert any(c[:1] in (["mkdir"], ["install"]) and data_dir in c for c in commands), "data dir not created"
    assert any(c[:1] == ["chown"] and data_dir in c and any(w.split(":")[0] == user for w in c[1:])
               for c in commands), f"data dir not chowned to {user}"


def test_dev_token_lives_in_the_data_volume():
    import yaml  # PyYAML, through huggingface_hub (tokenizers)

    image_env = stages(DOCKERFILE)[-1].env
    teleo = yaml.safe_load(COMPOSE)["services"]["teleo"]
    environment = teleo.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(e.split("=", 1) for e in environment)
    env = {**image_env, **{k: str(v) for k, v in environment.items()}}
    assert "TELEO_DATA_DIR" in env and "TELEO_DEV_TOKEN_FILE" in env, "the container sets no data dir or token file"
    data_dir = PurePosixPath(env["TELEO_DATA_DIR"])
    token = PurePosixPath(env["TELEO_DEV_TOKEN_FILE"])
    assert token.is_absolute() and token.is_relative_to(data_dir) and token != data_dir
    named = set(yaml.safe_load(COMPOSE).get("volumes") or {})
    mounts = [v.split(":") for v in teleo["volumes"] if isinstance(v, str)]
    assert any(src in named and data_dir.is_relative_to(dst) for src, dst, *_ in mounts), mounts


def test_cuvs_is_pinned_to_one_release_everywhere():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    cuvs = [r for r in pyproject["project"]["optional-dependencies"]["gpu"] if r.startswith("cuvs")]
    assert len(cuvs) == 1 and re.fullmatch(r"cuvs-cu12==\d+\.\d+\.\d+", cuvs[0]), cuvs
    for name, text in {**DOCKERFILES, "README.md": README}.items():
        for spec in re.findall(r"\bcuvs[\w-]*[=<>!~][^\s'\"`]*", text):
            assert spec == cuvs[0], (name, spec)
