#!/usr/bin/env python3
"""Goldens from mlx-lm itself, for inference's mlx-lm parity tests (mlxlm_test.go).

It needs MLX's Python bindings and an mlx-lm source tree on PYTHONPATH; the goldens
in this folder were made with MLX 0.31.2 (a CPU build on Linux) and mlx-lm 0.31.3.
Nothing here is needed to run the tests: they read only the files this writes.

    go test ./inference -run TestMlxLM -mlxlm-bases /tmp/bases   # the base folders
    python3 inference/testdata/mlxlm/mlxlm_goldens.py /tmp/bases

For every case it writes logits/<case>-<compute>.json: the logits mlx-lm computes on
the token rows of ../goldens/tokens.json, in float32 or in the checkpoint's own dtype
(bfloat16), as little-endian float32 in base64. For every folder mlx-lm quantizes
(mlx_lm.utils.quantize_model, as mlx_lm.convert -q does, with and without each
mixed_* recipe of convert.py) it writes quantized/<case>.json: the config.json block
mlx-lm wrote and the SHA-256 of every tensor it saved. mixed_3_6/ is one such
folder as mlx-lm saved it, to be loaded as it is. adapter/ is a random LoRA adapter
and fused/<case>.json the tensors mlx_lm.fuse writes with it.
"""

import base64
import hashlib
import json
import os
import shutil
import sys
import types
from pathlib import Path

# mlx_lm imports transformers, huggingface_hub and tqdm at module level for
# tokenizers, downloads and progress bars, none of which is used here; offline
# stand-ins suffice.
for name in ("transformers", "huggingface_hub"):
    try:
        __import__(name)
    except ImportError:
        mod = types.ModuleType(name)
        for attr in ("PreTrainedTokenizer", "PreTrainedTokenizerFast", "AutoTokenizer"):
            setattr(mod, attr, type(attr, (), {"register": staticmethod(lambda *a, **k: None)}))
        mod.snapshot_download = mod.scan_cache_dir = lambda *a, **k: None
        sys.modules[name] = mod
try:
    import tqdm  # noqa: F401  (mlx_lm.tuner imports it for progress bars)
except ImportError:
    sys.modules["tqdm"] = types.ModuleType("tqdm")
    sys.modules["tqdm"].tqdm = lambda it=None, *a, **k: it
errors = types.ModuleType("huggingface_hub.errors")
errors.LocalEntryNotFoundError = type("LocalEntryNotFoundError", (Exception,), {})
sys.modules.setdefault("huggingface_hub.errors", errors)

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.convert import mixed_quant_predicate_builder
from mlx_lm.utils import load_model, quantize_model, save_config, save_model

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "models"
TOKENS = json.loads((HERE.parent / "goldens" / "tokens.json").read_text())


def load(folder):
    """load_model, with the max_position_embeddings mlx-lm's qwen3 requires and
    the fixtures leave out (it bounds nothing at these lengths)."""
    cfg = json.loads((Path(folder) / "config.json").read_text())
    extra = {} if cfg.get("max_position_embeddings") else {"max_position_embeddings": 4096}
    return load_model(Path(folder), model_config=extra)


def logits_of(model, dtype):
    if dtype == "float32":
        model.set_dtype(mx.float32)
    out = model(mx.array(TOKENS))
    mx.eval(out)
    return np.array(out.astype(mx.float32))


def write_logits(case, compute, logits):
    d = HERE / "logits"
    d.mkdir(exist_ok=True)
    raw = logits.astype("<f4").tobytes()
    (d / f"{case}-{compute}.json").write_text(
        json.dumps(
            {"case": case, "compute": compute, "shape": list(logits.shape),
             "logits_f32le": base64.b64encode(raw).decode()},
            indent=1,
        )
        + "\n"
    )


def tensor_hashes(folder):
    out = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        for name, a in sorted(mx.load(str(f)).items()):
            mx.eval(a)
            if a.dtype == mx.bfloat16:
                raw = np.array(a.view(mx.uint16)).tobytes()
            else:
                raw = np.array(a).tobytes()
            out[name] = {"dtype": str(a.dtype).removeprefix("mlx.core."), "shape": list(a.shape),
                         "sha256": hashlib.sha256(raw).hexdigest()}
    return out


def quantize(base, case, bits=None, group_size=None, recipe=None, keep=False):
    """mlx_lm.convert -q on base, the way convert() does it, without a tokenizer."""
    model, config = load(base)
    config = json.loads((Path(base) / "config.json").read_text())
    pred = mixed_quant_predicate_builder(recipe, model, group_size) if recipe else None
    model, config = quantize_model(model, config, group_size, bits, quant_predicate=pred)
    out = Path("/tmp") / f"mlxlm-{case}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    save_model(out, model, donate_model=False)
    save_config(config, config_path=out / "config.json")
    q = HERE / "quantized"
    q.mkdir(exist_ok=True)
    tensors = ",\n".join(f"  {json.dumps(n)}: {json.dumps(v)}" for n, v in tensor_hashes(out).items())
    (q / f"{case}.json").write_text(
        f'{{"case": {json.dumps(case)},\n "quantization": {json.dumps(config["quantization"])},\n'
        f' "tensors": {{\n{tensors}\n }}}}\n')
    if keep:
        dst = HERE / case
        shutil.rmtree(dst, ignore_errors=True)
        dst.mkdir()
        for f in ("config.json", "model.safetensors"):
            shutil.copy(out / f, dst / f)
    return out


def write_adapter(out):
    """A random LoRA adapter in mlx-lm's layout over the llama bases."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    mx.random.seed(3)
    w = {}
    for layer in range(4):
        for key, (i, o) in {"self_attn.q_proj": (64, 64), "mlp.down_proj": (128, 64)}.items():
            p = f"model.layers.{layer}.{key}"
            w[p + ".lora_a"] = mx.random.normal((i, 4)) * 0.1
            w[p + ".lora_b"] = mx.random.normal((4, o)) * 0.05
    mx.save_safetensors(str(out / "adapters.safetensors"), w)
    (out / "adapter_config.json").write_text(json.dumps(
        {"fine_tune_type": "lora", "num_layers": 4,
         "lora_parameters": {"rank": 4, "scale": 2.0, "dropout": 0.0,
                             "keys": ["self_attn.q_proj", "mlp.down_proj"]}}, indent=4) + "\n")


def fuse(base, adapter, case):
    """mlx_lm.fuse without --dequantize: every LoRALinear.fuse()d, then saved."""
    from mlx.utils import tree_unflatten
    from mlx_lm.utils import load_adapters

    model, config = load(base)
    model = load_adapters(model, str(adapter))
    fused = [(n, m.fuse(dequantize=False)) for n, m in model.named_modules() if hasattr(m, "fuse")]
    model.update_modules(tree_unflatten(fused))
    out = Path("/tmp") / f"mlxlm-fused-{case}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    save_model(out, model, donate_model=False)
    d = HERE / "fused"
    d.mkdir(exist_ok=True)
    tensors = ",\n".join(f"  {json.dumps(n)}: {json.dumps(v)}" for n, v in tensor_hashes(out).items())
    (d / f"{case}.json").write_text(f'{{"case": {json.dumps(case)},\n "tensors": {{\n{tensors}\n }}}}\n')


def main():
    bases = Path(sys.argv[1])
    # The parity fixtures, each in float32 and, when stored so, in bfloat16.
    for f in sorted(FIXTURES.iterdir()):
        cfg = json.loads((f / "config.json").read_text())
        computes = ["float32"] + (["bfloat16"] if cfg.get("torch_dtype") == "bfloat16" else [])
        for c in computes:
            try:
                model, _ = load(f)
            except ValueError as e:  # mlx-lm's qwen2 has no head_dim: 4 heads of 16 in 32
                print(f"skipped {f.name}: mlx-lm cannot load it: {e}")
                break
            write_logits("fixture-" + f.name, c, logits_of(model, c))
    # Folders mlx-lm quantizes from the bases mlxlm_test.go writes.
    cases = [
        ("llama-f32-q4g64", "llama-f32", dict(bits=4, group_size=64)),
        ("llama-bf16-q4g64", "llama-bf16", dict(bits=4, group_size=64)),
        ("llama-bf16-q8g32", "llama-bf16", dict(bits=8, group_size=32)),
        ("qwen3-bf16-q4g64", "qwen3-bf16", dict(bits=4, group_size=64)),
        ("llama-bf16-mixed_2_6", "llama-bf16", dict(recipe="mixed_2_6")),
        ("llama-bf16-mixed_3_4", "llama-bf16", dict(recipe="mixed_3_4")),
        ("mixed_3_6", "llama-bf16", dict(recipe="mixed_3_6", keep=True)),
        ("llama-bf16-mixed_4_6", "llama-bf16", dict(recipe="mixed_4_6")),
    ]
    for case, base, kw in cases:
        out = quantize(bases / base, case, **kw)
        stored = json.loads((out / "config.json").read_text()).get("torch_dtype")
        for c in ["float32"] + (["bfloat16"] if stored == "bfloat16" else []):
            model, _ = load(out)
            write_logits(case, c, logits_of(model, c))
    # mlx_lm.fuse of a random adapter into the bfloat16 base and its 4-bit copy.
    write_adapter(HERE / "adapter")
    fuse(bases / "llama-bf16", HERE / "adapter", "llama-bf16")
    fuse(Path("/tmp/mlxlm-llama-bf16-q4g64"), HERE / "adapter", "llama-bf16-q4g64")
    for base in ("llama-f32", "llama-bf16", "qwen3-bf16"):
        stored = json.loads((bases / base / "config.json").read_text()).get("torch_dtype")
        for c in ["float32"] + (["bfloat16"] if stored == "bfloat16" else []):
            model, _ = load(bases / base)
            write_logits("base-" + base, c, logits_of(model, c))


if __name__ == "__main__":
    main()
