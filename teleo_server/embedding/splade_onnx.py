"""Write splade-tiny (a BERT masked LM in safetensors) as an ONNX graph, without PyTorch.

The graph is BERT's forward pass spelled out in standard ONNX ops (opset 17), followed by the
SPLADE pooling, so onnxruntime returns one vocabulary-sized vector per text instead of a
(B, T, 30522) logits tensor::

    inputs  input_ids, attention_mask, token_type_ids   int64 (B, T)
    output  SPLADE                                       float32 (B, V)
            SPLADE[b, v] = max_t attention_mask[b, t] * log(1 + relu(logits[b, t, v]))

The graph takes the maximum first: log(1 + relu(x)) never decreases as x grows, so the largest
logit of the text's tokens gives the largest activation, and ``log(1 + relu(max_t logits))`` is
the same value, computed on (B, V) instead of (B, T, V) — a 256-word-piece chunk computes 7.8
million activations the other way; the graph runs 1.4 to 1.65 times as fast. The outputs are
the same bits as the activation-first order (``reference_pooling=True``, which the test suite
compares with it) and close to an independent NumPy forward pass.

Building the graph directly keeps set-up to two small packages (``onnx``, ``safetensors``)
instead of PyTorch and transformers, and puts the pooling where it is cheapest.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

OPSET = 17
_MASK_NEG = -1.0e9  # added to the scores of padding keys; exp underflows to exactly 0


class _Graph:
    def __init__(self) -> None:
        self.nodes: list = []
        self.inits: list = []
        self._n = 0

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        from onnx import helper

        self._n += 1
        out = f"{op_type.lower()}_{self._n}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def linear(self, x: str, w: np.ndarray, b: np.ndarray, name: str) -> str:
        # torch Linear stores (out, in); MatMul wants (in, out)
        wt = self.const(f"{name}.wT", w.T.astype(np.float32))
        return self.op("Add", [self.op("MatMul", [x, wt]), self.const(f"{name}.b", b)])

    def layer_norm(self, x: str, gamma: np.ndarray, beta: np.ndarray, eps: float,
                   name: str) -> str:
        return self.op("LayerNormalization",
                       [x, self.const(f"{name}.g", gamma), self.const(f"{name}.b", beta)],
                       axis=-1, epsilon=eps)

    def gelu(self, x: str) -> str:
        # exact (erf) GELU, BERT's "gelu"
        half = self.const(f"c_half_{self._n}", np.array(0.5, np.float32))
        one = self.const(f"c_one_{self._n}", np.array(1.0, np.float32))
        rsqrt2 = self.const(f"c_rsqrt2_{self._n}", np.array(1 / math.sqrt(2), np.float32))
        erf = self.op("Erf", [self.op("Mul", [x, rsqrt2])])
        return self.op("Mul", [self.op("Mul", [x, half]), self.op("Add", [erf, one])])


def build_splade_onnx(weights: dict[str, np.ndarray], config: dict, *, reference_pooling: bool = False):
    """An ``onnx.ModelProto`` computing SPLADE vectors from BertForMaskedLM weights.

    Parameters
    ----------
    weights : safetensors tensors by name (``bert.*``, ``cls.predictions.*``), float32.
    config : the model's ``config.json`` (hidden_size, num_attention_heads, layer_norm_eps, ...).
    """
    from onnx import TensorProto, helper

    if config.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"unsupported hidden_act {config['hidden_act']!r}")
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = hidden // heads
    eps = float(config.get("layer_norm_eps", 1e-12))
    w = {k: np.asarray(v, np.float32) for k, v in weights.items()}
    g = _Graph()

    ids, mask, types = "input_ids", "attention_mask", "token_type_ids"
    # (T,) as a 1-D tensor: positions are the first T rows of the position table
    seq_len = g.op("Slice", [g.op("Shape", [ids]), g.const("c_one_i", np.array([1], np.int64)),
                             g.const("c_two_i", np.array([2], np.int64))])
    zero = g.const("c_zero_i", np.array([0], np.int64))
    word = g.const("word_embeddings", w["bert.embeddings.word_embeddings.weight"])
    x = g.op("Add", [
        g.op("Add", [g.op("Gather", [word, ids], axis=0),
                     g.op("Gather", [g.const("type_embeddings",
                                             w["bert.embeddings.token_type_embeddings.weight"]),
                                     types], axis=0)]),
        g.op("Slice", [g.const("position_embeddings",
                               w["bert.embeddings.position_embeddings.weight"]),
                       zero, seq_len, zero]),
    ])
    x = g.layer_norm(x, w["bert.embeddings.LayerNorm.gamma"], w["bert.embeddings.LayerNorm.beta"],
                     eps, "emb_ln")

    mask_f = g.op("Cast", [mask], to=TensorProto.FLOAT)                      # (B, T)
    key_bias = g.op("Mul", [
        g.op("Sub", [g.const("c_onef", np.array(1.0, np.float32)), mask_f]),
        g.const("c_neg", np.array(_MASK_NEG, np.float32))])
    key_bias = g.op("Unsqueeze", [key_bias, g.const("c_ax12", np.array([1, 2], np.int64))])
    split_heads = g.const("c_split", np.array([0, 0, heads, head_dim], np.int64))
    merge_heads = g.const("c_merge", np.array([0, 0, hidden], np.int64))
    scale = g.const("c_scale", np.array(1 / math.sqrt(head_dim), np.float32))

    for layer in range(int(config["num_hidden_layers"])):
        p = f"bert.encoder.layer.{layer}."

        def proj(kind: str, perm: list[int], _p: str = p, _x: str = x) -> str:
            lin = g.linear(_x, w[f"{_p}attention.self.{kind}.weight"],
                           w[f"{_p}attention.self.{kind}.bias"], f"l{layer}.{kind}")
            return g.op("Transpose", [g.op("Reshape", [lin, split_heads])], perm=perm)

        q = proj("query", [0, 2, 1, 3])                                       # (B, H, T, d)
        k = proj("key", [0, 2, 3, 1])                                         # (B, H, d, T)
        v = proj("value", [0, 2, 1, 3])
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), key_bias])
        ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_heads])
        attn = g.linear(ctx, w[f"{p}attention.output.dense.weight"],
                        w[f"{p}attention.output.dense.bias"], f"l{layer}.attn_out")
        x = g.layer_norm(g.op("Add", [attn, x]), w[f"{p}attention.output.LayerNorm.gamma"],
                         w[f"{p}attention.output.LayerNorm.beta"], eps, f"l{layer}.ln1")
        inter = g.gelu(g.linear(x, w[f"{p}intermediate.dense.weight"],
                                w[f"{p}intermediate.dense.bias"], f"l{layer}.inter"))
        out = g.linear(inter, w[f"{p}output.dense.weight"], w[f"{p}output.dense.bias"],
                       f"l{layer}.out")
        x = g.layer_norm(g.op("Add", [out, x]), w[f"{p}output.LayerNorm.gamma"],
                         w[f"{p}output.LayerNorm.beta"], eps, f"l{layer}.ln2")

    t = g.gelu(g.linear(x, w["cls.predictions.transform.dense.weight"],
                        w["cls.predictions.transform.dense.bias"], "head"))
    t = g.layer_norm(t, w["cls.predictions.transform.LayerNorm.gamma"],
                     w["cls.predictions.transform.LayerNorm.beta"], eps, "head_ln")
    # the decoder is tied to the word embeddings (tie_word_embeddings)
    logits = g.op("Add", [
        g.op("MatMul", [t, g.op("Transpose", [word], perm=[1, 0])]),
        g.const("decoder.b", w["cls.predictions.bias"])])
    if reference_pooling:  # the activation of every token, then the maximum (the first graph's order)
        act = g.op("Log", [g.op("Add", [g.op("Relu", [logits]), "c_onef"])])
        act = g.op("Mul", [act, g.op("Unsqueeze", [mask_f, g.const("c_ax2", np.array([2], np.int64))])])
        pooled = g.op("ReduceMax", [act], axes=[1], keepdims=0)
    else:  # the maximum of the real tokens' logits (padding pushed far below), then the activation
        pad = g.op("Mul", [g.op("Sub", ["c_onef", mask_f]), "c_neg"])
        top = g.op("ReduceMax", [g.op("Add", [logits, g.op("Unsqueeze", [pad, g.const("c_ax2", np.array([2], np.int64))])])],
                   axes=[1], keepdims=0)
        pooled = g.op("Log", [g.op("Add", [g.op("Relu", [top]), "c_onef"])])
    g.nodes.append(helper.make_node("Identity", [pooled], ["SPLADE"]))

    vocab = w["bert.embeddings.word_embeddings.weight"].shape[0]
    graph = helper.make_graph(
        g.nodes, "splade",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
         for n in (ids, mask, types)],
        [helper.make_tensor_value_info("SPLADE", TensorProto.FLOAT, ["batch", vocab])],
        initializer=g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="teleo")
    model.ir_version = 8
    return model


def export_splade(src_dir: Path, dst: Path, *, reference_pooling: bool = False) -> None:
    """Read ``model.safetensors`` + ``config.json`` from ``src_dir``; write the ONNX to ``dst``."""
    import onnx
    from safetensors.numpy import load_file

    config = json.loads((src_dir / "config.json").read_text())
    model = build_splade_onnx(load_file(str(src_dir / "model.safetensors")), config,
                              reference_pooling=reference_pooling)
    onnx.checker.check_model(model)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".tmp")
    onnx.save_model(model, str(tmp))
    tmp.replace(dst)


__all__ = ["OPSET", "build_splade_onnx", "export_splade"]
