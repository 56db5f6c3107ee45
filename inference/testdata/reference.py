#!/usr/bin/python3
"""Independent NumPy reference for inference's parity tests.

For every folder under testdata/models/ it reads config.json and the safetensors
weights (parsed here by hand: an 8-byte little-endian header length, a JSON header,
raw little-endian data), runs the model forward in float64 on the token rows in
testdata/goldens/tokens.json, and writes the logits to testdata/goldens/<name>.json.

It follows Hugging Face transformers' modeling code (LlamaForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM): RMSNorm, rotate-half RoPE with the llama3
frequency adjustment, grouped-query attention by repeating key/value heads, a causal
softmax, SwiGLU. MLX-quantized weights (".scales"/".biases") are unpacked from their
LSB-first bit stream and dequantized as scale*q + bias. It shares no code with the Go
implementation; only NumPy is needed (Debian: python3-numpy).

Usage: /usr/bin/python3 inference/testdata/reference.py   (from the repository root,
or any folder: paths are relative to this file). The Go test with -update-fixtures
writes the checkpoints and then runs this script.
"""

import json
import math
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin : base + end]
        dtype, shape = info["dtype"], info["shape"]
        if dtype == "F32":
            a = np.frombuffer(raw, "<f4").astype(np.float64)
        elif dtype == "F16":
            a = np.frombuffer(raw, "<f2").astype(np.float64)
        elif dtype == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        elif dtype == "U32":
            a = np.frombuffer(raw, "<u4").copy()
        else:
            raise ValueError(f"{path}: {name}: dtype {dtype} not handled")
        tensors[name] = a.reshape(shape)
    return tensors


def unpack(words, cols, bits):
    """Values of an LSB-first bit stream held in little-endian uint32 rows."""
    rows = words.shape[0]
    stream = words.astype("<u4").view(np.uint8).reshape(rows, -1)
    bitarr = np.unpackbits(stream, axis=1, bitorder="little")[:, : cols * bits]
    bitarr = bitarr.reshape(rows, cols, bits).astype(np.int64)
    return (bitarr << np.arange(bits)).sum(axis=2)


def dense_weights(tensors, quant):
    """Replace every quantized triple by its dequantized float64 matrix."""
    out = dict(tensors)
    for name in list(tensors):
        if not name.endswith(".scales"):
            continue
        module = name[: -len(".scales")]
        scales, biases = tensors[module + ".scales"], tensors[module + ".biases"]
        group = quant["group_size"]
        bits = quant["bits"]
        cols = scales.shape[1] * group
        q = unpack(tensors[module + ".weight"], cols, bits).astype(np.float64)
        s = np.repeat(scales, group, axis=1)
        b = np.repeat(biases, group, axis=1)
        out[module + ".weight"] = s * q + b
        del out[module + ".scales"], out[module + ".biases"]
    return out


def inv_frequencies(cfg):
    d = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    base = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (np.arange(0, d, 2, dtype=np.float64) / d))
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "linear":
        return inv / rs["factor"]
    if kind == "llama3":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, scaled)
    raise ValueError(f"rope_scaling {kind} not handled")


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x, inv):
    """x: (B, H, L, D) at positions 0..L-1."""
    pos = np.arange(x.shape[2], dtype=np.float64)
    freqs = np.outer(pos, inv)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return x * np.cos(emb) + rotate_half(x) * np.sin(emb)


def linear(W, prefix, x):
    y = x @ W[prefix + ".weight"].T
    if prefix + ".bias" in W:
        y = y + W[prefix + ".bias"]
    return y


def forward(cfg, W, tokens):
    kind = cfg["model_type"]
    eps = cfg["rms_norm_eps"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    inv = inv_frequencies(cfg)
    B, L = tokens.shape
    x = W["model.embed_tokens.weight"][tokens]  # (B, L, hidden)
    mask = np.triu(np.full((L, L), -np.inf), k=1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        n = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = linear(W, p + "self_attn.q_proj", n).reshape(B, L, H, D)
        k = linear(W, p + "self_attn.k_proj", n).reshape(B, L, Hkv, D)
        v = linear(W, p + "self_attn.v_proj", n).reshape(B, L, Hkv, D)
        if kind == "qwen3":
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
        q, k = apply_rope(q, inv), apply_rope(k, inv)
        k = np.repeat(k, H // Hkv, axis=1)  # head h reads kv head h // (H/Hkv)
        v = np.repeat(v, H // Hkv, axis=1)
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D) + mask
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs = probs / probs.sum(axis=-1, keepdims=True)
        o = (probs @ v).transpose(0, 2, 1, 3).reshape(B, L, H * D)
        x = x + linear(W, p + "self_attn.o_proj", o)
        m = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        gate = linear(W, p + "mlp.gate_proj", m)
        up = linear(W, p + "mlp.up_proj", m)
        x = x + linear(W, p + "mlp.down_proj", gate / (1 + np.exp(-gate)) * up)
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W.get("lm_head.weight")
    if head is None or cfg.get("tie_word_embeddings", False):
        head = W["model.embed_tokens.weight"]
    return x @ head.T


def main():
    with open(os.path.join(HERE, "goldens", "tokens.json")) as f:
        tokens = np.array(json.load(f), dtype=np.int64)
    models = os.path.join(HERE, "models")
    for name in sorted(os.listdir(models)):
        folder = os.path.join(models, name)
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
        W = read_safetensors(os.path.join(folder, "model.safetensors"))
        if cfg.get("quantization"):
            W = dense_weights(W, cfg["quantization"])
        logits = forward(cfg, W, tokens)
        golden = {
            "model": name,
            "shape": list(logits.shape),
            "logits": [float("%.8g" % v) for v in logits.reshape(-1)],
        }
        with open(os.path.join(HERE, "goldens", name + ".json"), "w") as f:
            json.dump(golden, f, separators=(",", ":"))
            f.write("\n")
        print(f"{name}: logits {logits.shape}, |max| {np.abs(logits).max():.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
