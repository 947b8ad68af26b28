"""The Dockerfile, compose file and README agree (Docker itself cannot run on the CI machines)."""

from __future__ import annotations

import re

from tests._server import REPO

README = (REPO / "README.md").read_text()
DOCKERFILE = (REPO / "Dockerfile").read_text()
COMPOSE = (REPO / "deploy" / "compose.yaml").read_text()
TRITON_DOCKERFILE = (REPO / "deploy" / "triton.Dockerfile").read_text()


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
    assert re.search(r"^FROM nvidia/cuda:[\w.-]+-runtime", DOCKERFILE, re.M)
    assert ".[gpu]" in DOCKERFILE
    user = re.findall(r"^USER (\S+)", DOCKERFILE, re.M)
    assert user and user[-1] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK .*\n?.*teleo\", \"health", DOCKERFILE, re.M)


def test_gpu_extra_installs_cupy_and_cuvs():
    pyproject = (REPO / "pyproject.toml").read_text()
    gpu = re.search(r"^gpu = \[(.*?)\]", pyproject, re.M | re.S).group(1)
    assert "cupy-cuda12x" in gpu and "cuvs" in gpu


def test_compose_serves_the_checkout_repository_on_gpus():
    assert "../triton_models:/models" in COMPOSE
    assert "--model-config-name=gpu" in COMPOSE
    assert "TELEO_EMBEDDING__TRITON_URL: triton:8001" in COMPOSE
    for gpu_config in (REPO / "triton_models").glob("*/configs/gpu.pbtxt"):
        assert "KIND_GPU" in gpu_config.read_text(), gpu_config
