"""Shared plumbing of the python-backend models in ``triton_models/``.

``triton_python_backend_utils`` exists only inside Triton's python stub, so the models pass it in
as ``pb``. Every ``execute`` returns exactly one response per request: inputs are parsed per
request (a bad one gets its own INVALID_ARG error), the rest run as one batch, and if that batch
fails it is re-run request by request so one bad input cannot fail its neighbours.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from teleo_server.embedding.models import WindowExceeded

log = structlog.get_logger(__name__)

_CLIENT_ERRORS = (ValueError, UnicodeDecodeError, WindowExceeded)


def parameters(args: dict) -> dict[str, str]:
    """``parameters`` of the model's config.pbtxt as plain strings."""
    config = json.loads(args["model_config"])
    return {k: v["string_value"] for k, v in config.get("parameters", {}).items()}


def gpu_device(args: dict) -> int | None:
    """The CUDA device of a KIND_GPU instance, None for KIND_CPU."""
    if args.get("model_instance_kind") == "GPU":
        return int(args.get("model_instance_device_id", "0"))
    return None


def encoder_options(args: dict) -> dict:
    """Keyword options of an encoder (threads, batch size, device) from the model's config."""
    params = parameters(args)
    return {
        "threads": int(params.get("INTRA_OP_THREADS", "2")),
        "max_batch": int(params.get("ORT_BATCH", "32")),
        "gpu": gpu_device(args),
    }


def repository_root(args: dict) -> Path:
    """The model repository root (``args["model_repository"]`` is the model's own folder)."""
    return Path(args["model_repository"]).resolve().parent


def _error(pb, exc: BaseException):
    invalid = isinstance(exc, _CLIENT_ERRORS)
    code_name = "INVALID_ARG" if invalid else "INTERNAL"
    code = getattr(pb.TritonError, code_name, None)
    if not invalid:
        log.error("triton_model.failed", error=repr(exc))
    err = pb.TritonError(str(exc), code) if code is not None else pb.TritonError(str(exc))
    return pb.InferenceResponse(output_tensors=[], error=err)


def _response(pb, outputs: dict[str, np.ndarray]):
    return pb.InferenceResponse(output_tensors=[pb.Tensor(k, v) for k, v in outputs.items()])


def _parse_all(pb, requests, parse):
    responses: list[Any] = [None] * len(requests)
    parsed = []
    for i, request in enumerate(requests):
        try:
            parsed.append((i, parse(request)))
        except _CLIENT_ERRORS as exc:
            responses[i] = _error(pb, exc)
    return responses, parsed


def execute_isolated(pb, requests, parse: Callable[[Any], Any],
                     run: Callable[[list[Any]], list[dict[str, np.ndarray]]]) -> list:
    """``parse(request) -> item``; ``run(items) -> one output dict per item``."""
    responses, parsed = _parse_all(pb, requests, parse)
    if parsed:
        try:
            results: list[Any] = run([item for _, item in parsed])
        except Exception:
            results = []
            for _, item in parsed:
                try:
                    results.append(run([item])[0])
                except Exception as exc:  # noqa: BLE001 - becomes this request's error
                    results.append(exc)
        for (i, _), result in zip(parsed, results):
            responses[i] = _error(pb, result) if isinstance(result, BaseException) \
                else _response(pb, result)
    return responses


async def execute_isolated_async(
    pb, requests, parse: Callable[[Any], Any],
    run: Callable[[list[Any]], Awaitable[list[dict[str, np.ndarray]]]],
) -> list:
    """:func:`execute_isolated` for a BLS model whose ``run`` awaits other models."""
    responses, parsed = _parse_all(pb, requests, parse)
    if parsed:
        try:
            results: list[Any] = await run([item for _, item in parsed])
        except Exception:
            results = []
            for _, item in parsed:
                try:
                    results.append((await run([item]))[0])
                except Exception as exc:  # noqa: BLE001 - becomes this request's error
                    results.append(exc)
        for (i, _), result in zip(parsed, results):
            responses[i] = _error(pb, result) if isinstance(result, BaseException) \
                else _response(pb, result)
    return responses


def input_array(pb, request, name: str) -> np.ndarray:
    tensor = pb.get_input_tensor_by_name(request, name)
    if tensor is None:
        raise ValueError(f"missing input {name}")
    return tensor.as_numpy()


def offsets(sizes: list[int]) -> list[tuple[int, int]]:
    """[(start, stop)] of consecutive slices with the given sizes."""
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def fit_axis1(array: np.ndarray, width: int) -> np.ndarray:
    """``array[:, :width]``, zero-padded when narrower (Triton outputs need a non-zero width)."""
    if array.shape[1] >= width:
        return np.ascontiguousarray(array[:, :width])
    out = np.zeros((array.shape[0], width, *array.shape[2:]), array.dtype)
    out[:, :array.shape[1]] = array
    return out


__all__ = [
    "encoder_options",
    "execute_isolated",
    "execute_isolated_async",
    "fit_axis1",
    "gpu_device",
    "input_array",
    "offsets",
    "parameters",
    "repository_root",
]
