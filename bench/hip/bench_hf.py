#!/usr/bin/env python3
"""transformers' DeepseekV4ForCausalLM prefill on the GPU in bf16, for bench/hip.

Loads the same synthetic model folder tdiff runs (HF layout), in bf16 on cuda, and runs the
prefill on the case's token ids and attention mask: one warm-up, then --runs timed forwards
(torch.cuda.synchronize around each), and one forward with CUDA events around the embedding,
every decoder layer's attention and MoE, and lm_head. Writes a JSON file.

transformers 5.17 keeps some modules in float32 (_keep_in_fp32_modules) and then rejects a
bf16 checkpoint at the first bf16 linear; the smallest honest change is to cast those
float32 parameters and buffers to bf16 after loading (model.to(torch.bfloat16)), which is
what --cast does (default on). If that fails, the script falls back to a float32 run and
says so in the JSON ("dtype").

A model folder in DeepSeek's release layout (`tdiff synth --format release`: FP8 linears,
FP4 experts, release names, shards, the release config.json; told apart as tdiff does, by a
tensor named embed.weight; --layout forces either) is loaded by the tdiff_capture package's
release module (python/tdiff_capture/release.py, as tdiff-capture loads one): the HF config built from the release one (legacy keys folded as tdiff reads them), the
model built on the GPU in bf16, and each of its tensors filled from the release, dequantised
on the GPU tensor by tensor (exact: codes of 4 significant bits times powers of two) and the
routed experts stacked into HF's [E, 2I, D] / [E, D, I] tensors, a few experts at a time. No
float32 fallback there (at real widths it would not fit): a failure is the script's exit.
The timing is the same; the JSON adds "layout", "load_s" and the release's tensor counts.
python/tests/test_release_codes.py and test_release.py check that loader's logic without a
GPU (ctest runs them: python_capture_package).

    python3 bench/hip/bench_hf.py --model DIR --case case.h5 [--runs 3] [--layout auto|hf|release] [-o bench_hf.json]
"""
import argparse
import json
import os
import sys
import time

import h5py
import numpy as np
import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from tdiff_capture import release as release_hf  # noqa: E402


def load(model_dir, dtype):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    kept = sorted({str(p.dtype) for p in model.parameters()})
    model.to(dtype)  # the float32-kept modules, cast (see the module docstring)
    return model.to("cuda").eval(), kept


def load_release(model_dir, dtype, info):
    """DeepseekV4ForCausalLM on cuda in `dtype`, its tensors from a release-layout folder
    (tdiff_capture.release.build_model). Fills `info` with what the JSON reports about the load."""
    model, loaded = release_hf.build_model(model_dir, dtype, "cuda")
    info.update(loaded)
    info["gpu_memory_gb_after_load"] = round(torch.cuda.memory_allocated() / 1e9, 2)
    return model, loaded["built_param_dtypes"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--case", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--layout", choices=("auto", "hf", "release"), default="auto",
                    help="the model folder's layout (auto: release when it has a tensor named embed.weight)")
    ap.add_argument("-o", "--out", default="bench_hf.json")
    a = ap.parse_args()
    release = a.layout == "release" or (a.layout == "auto" and release_hf.is_release_layout(a.model))
    with h5py.File(a.case, "r") as f:
        ids = torch.from_numpy(np.asarray(f["inputs/ids"], dtype=np.int64)).cuda()
        mask = torch.from_numpy(np.asarray(f["inputs/mask"], dtype=np.int64)).cuda()
    result = {"model": a.model, "case": a.case, "tokens": int(ids.numel()), "gpu": torch.cuda.get_device_name()}
    dtype = torch.bfloat16
    if release:
        info = {}
        model, kept = load_release(a.model, dtype, info)
        result.update(info)
        result["loaded_param_dtypes"] = kept
        print(f"# release layout: {info['release_tensors_filled']} tensors ({info['release_stored_gb']} GB stored) "
              f"loaded in {info['load_s']} s; model tensors not in the release (left as built): "
              f"{len(info['model_tensors_not_in_release'])} {info['model_tensors_not_in_release'][:6]}", flush=True)
    try:
        if not release:
            model, kept = load(a.model, dtype)
            result["loaded_param_dtypes"] = kept
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)
    except Exception as e:  # fall back to float32, and say so
        if release:
            raise
        result["bf16_error"] = f"{type(e).__name__}: {e}"[:500]
        dtype = torch.float32
        model, kept = load(a.model, dtype)
        result["loaded_param_dtypes"] = kept
    result["dtype"] = str(dtype)
    result["experts_implementation"] = str(getattr(model.config, "_experts_implementation", None))
    result["attn_implementation"] = str(getattr(model.config, "_attn_implementation", None))
    times = []
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
        for _ in range(a.runs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(input_ids=ids, attention_mask=mask)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        # Per-module device time with CUDA events.
        events, handles = [], []

        def wrap(name, module):
            def pre(mod, args, kwargs=None):
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                events.append([name, e, None])

            def post(mod, args, out):
                for row in reversed(events):
                    if row[0] == name and row[2] is None:
                        e = torch.cuda.Event(enable_timing=True)
                        e.record()
                        row[2] = e
                        break
            handles.append(module.register_forward_pre_hook(pre))
            handles.append(module.register_forward_hook(post))

        wrap("embed", model.model.embed_tokens)
        for l, layer in enumerate(model.model.layers):
            wrap(f"L{l:02d}.attn", layer.self_attn)
            wrap(f"L{l:02d}.moe", layer.mlp)
        wrap("lm_head", model.lm_head)
        model(input_ids=ids, attention_mask=mask)
        torch.cuda.synchronize()
        for h in handles:
            h.remove()
        result["module_ms"] = {n: s.elapsed_time(e) for n, s, e in events if e is not None}
    result["prefill_ms"] = times
    result["prefill_ms_median"] = sorted(times)[len(times) // 2]
    print(json.dumps(result, indent=1))
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
