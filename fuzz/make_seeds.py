#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora into fuzz/corpus/<target>/: small valid inputs and
edge cases (plus the regression inputs of bugs the fuzzers found, kept as regress-*).

    fuzz/make_seeds.py --tdiff build/tdiff

The case-file seeds are made by tdiff itself (synth tiny, case new, golden, run), so they
have the layout tdiff writes; everything else is written here. Deterministic: running it
again rewrites the same bytes (except the case files' recorded environment)."""
import argparse
import json
import os
import shutil
import struct
import subprocess
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None, raw_header=None):
    """tensors: [(name, dtype name, shape, bytes)], laid out in order."""
    header, blob = {}, b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    if metadata:
        header["__metadata__"] = metadata
    text = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":"))
    return struct.pack("<Q", len(text)) + text.encode() + blob


def f32(*shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape).tobytes()


def seeds_safetensors():
    t = "safetensors"
    put(t, "valid", safetensors([("a", "F32", (2, 3), f32(2, 3)), ("b", "I64", (4,), np.arange(4).tobytes()),
                                 ("c", "BF16", (2,), b"\x80\x3f\x00\x40")], {"format": "pt"}))
    put(t, "bytes-formats", safetensors([("s", "F8_E8M0", (2, 2), bytes([127, 128, 126, 0xFF])),
                                         ("q", "I8", (1, 3), b"\x12\x34\x56"), ("f8", "F8_E4M3", (4,), b"\x38\x7f\x80\x00")]))
    put(t, "empty-header", safetensors([]))
    put(t, "empty-tensors", safetensors([("z", "F32", (0, 5), b""), ("y", "F64", (0,), b"")]))
    put(t, "scalar", safetensors([("s", "F64", (), struct.pack("<d", 1.5))]))
    put(t, "misaligned", safetensors([("u", "U8", (1,), b"\x01"), ("f", "F32", (2,), f32(2))]))
    put(t, "rank7", safetensors([("r", "F32", (1,) * 7, f32(1))]))
    put(t, "huge-dim-zero", safetensors([("h", "F8_E4M3", (0, 2**63 - 1), b"")]))
    put(t, "header-past-end", struct.pack("<Q", 2**64 - 1) + b"{}")
    put(t, "truncated", b"\x05\x00\x00")


def seeds_index():
    t = "safetensors_index"
    put(t, "valid", json.dumps({"metadata": {"total_size": 40}, "weight_map": {"a": "shard-a.safetensors",
                                "b": "shard-a.safetensors", "c": "shard-b.safetensors"}}))
    put(t, "missing-shard", json.dumps({"weight_map": {"a": "shard-c.safetensors"}}))
    put(t, "wrong-shard", json.dumps({"weight_map": {"c": "shard-a.safetensors"}}))
    put(t, "outside", json.dumps({"weight_map": {"a": "../index-model/shard-a.safetensors"}}))
    put(t, "not-a-map", json.dumps({"weight_map": ["shard-a.safetensors"]}))
    put(t, "huge-number", '{"metadata": {"total_size": 1e999}, "weight_map": {}}')


def seeds_release_scales():
    t = "release_scales"
    e8m0 = lambda n: bytes([127 + (i % 3) for i in range(n)])
    codes = lambda n: bytes([(i * 37) % 256 & 0x77 for i in range(n)])  # no FP8 NaN (0x7F / 0xFF)
    put(t, "fp8-e8m0", safetensors([("weight", "F8_E4M3", (130, 200), codes(130 * 200)),
                                    ("scale", "F8_E8M0", (2, 2), e8m0(4))]))
    put(t, "fp8-f32", safetensors([("weight", "F8_E4M3", (3, 5), codes(15)),
                                   ("scale", "F32", (1, 1), struct.pack("<f", 0.5))]))
    put(t, "fp8-nan-code", safetensors([("weight", "F8_E4M3", (1, 2), b"\x00\x7f"), ("scale", "F8_E8M0", (1, 1), b"\x7f")]))
    put(t, "fp8-nan-scale", safetensors([("weight", "F8_E4M3", (1, 2), b"\x00\x01"), ("scale", "F8_E8M0", (1, 1), b"\xff")]))
    put(t, "fp4", safetensors([("weight", "I8", (4, 40), codes(160)), ("scale", "F8_E8M0", (4, 3), e8m0(12))]))
    put(t, "fp4-odd-columns", safetensors([("weight", "I8", (2, 3), codes(6)), ("scale", "F8_E8M0", (2, 1), e8m0(2))],
                                          {"columns": "5"}))
    put(t, "fp4-bad-scale-shape", safetensors([("weight", "I8", (2, 16), codes(32)), ("scale", "F8_E8M0", (1, 1), e8m0(1))]))
    put(t, "fp8-huge-zero-rows", safetensors([("weight", "F8_E4M3", (0, 2**63 - 1), b""), ("scale", "F8_E8M0", (0, 0), b"")]))


def seeds_config(tdiff, work):
    t = "config"
    for name, extra in (("tiny", []), ("release", ["--format", "release"])):
        out = os.path.join(work, "cfg-" + name)
        subprocess.run([tdiff, "synth", "--preset", "tiny", "--seed", "1", "-o", out] + extra, check=True,
                       stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "config.json"), "rb") as f:
            put(t, name, f.read())
    with open(os.path.join(ROOT, "corpus", t, "tiny")) as f:
        tiny = json.load(f)
    # The huge values of issue 19 (signed overflows before any check).
    for name, change in (("rotary-1e300", {"partial_rotary_factor": 1e300}),
                         ("heads-2p40", {"num_attention_heads": 2**40, "head_dim": 2**30}),
                         ("hc-mult-2p40", {"hc_mult": 2**40}),
                         ("layers-1e12", {"num_hidden_layers": 10**12, "layer_types": None, "mlp_layer_types": None}),
                         ("negative-vocab", {"vocab_size": -1})):
        c = dict(tiny)
        for k, v in change.items():
            if v is None:
                c.pop(k, None)
            else:
                c[k] = v
        put(t, name, json.dumps(c, indent=1))
    put(t, "empty-object", "{}")
    put(t, "eps-1e999", '{"model_type": "deepseek_v4", "rms_norm_eps": 1e999}')


def seeds_policy():
    t = "policy"
    put(t, "toml", b"\x00" + b'preset = "naive"\n[global]\nsoftmax_stats = "fp32"\n'
        b'[[override]]\nstages = "L0[1-2].attn.*"\nmatmul_accum = "fp16"\nhc_eps = false\n')
    put(t, "toml-toplevel-knob", b"\x00" + b'qk_accum = "fp16"\n')
    put(t, "json", b"\x01" + json.dumps({"preset": "fixed", "global": {"router": "bf16"},
                                          "override": [{"stages": "lm_head", "logits": "fp16"}]}).encode())
    put(t, "set", b"\x02" + b"L0[2-3].attn.core:softmax_stats=fp16")
    put(t, "set-every-stage", b"\x02" + b"topk_ties=unstable")
    put(t, "thresholds", b"\x03" + b'[default]\nmax_abs_warn = 5e-3\n[[rule]]\nstages = ["L0[2-4].attn.*", "lm_head"]\n'
        b"cosine_fail = 0.999\nmismatch_fail = 0.5\n")
    put(t, "rule", b"\x04" + b"L0*.moe.*:cosine_fail=0.98,max_abs_fail=inf")
    put(t, "rule-every-stage", b"\x04" + b"max_abs_scaled=0")


def seeds_suite():
    t = "suite"
    put(t, "valid", 'name = "fuzz"\ntokens = "golden.txt"\nthresholds = "thresholds.toml"\nrepeat = 2\n'
        'selections = "free"\n[model]\npreset = "tiny"\nseed = 1\nlayers = 2\n'
        '[[case]]\nname = "a"\nprompts = [1, 2, 3]\npad_side = "left"\npad_to = 12\nseed = 101\n'
        '[[case]]\nname = "b"\nabout = "longest"\nprompts = [4]\nseed = 7\n')
    put(t, "missing-prompt", 'name = "x"\ntokens = "golden.txt"\n[model]\npreset = "tiny"\nseed = 1\n'
        '[[case]]\nname = "a"\nprompts = [9]\nseed = 1\n')
    put(t, "huge-pad", 'name = "x"\ntokens = "golden.txt"\n[model]\npreset = "tiny"\nseed = 1\n'
        '[[case]]\nname = "a"\nprompts = [1]\npad_to = 1000000000000\nseed = 1\n')


def seeds_tokens():
    t = "tokens"
    with open(os.path.join(ROOT, "..", "cases", "tiny", "golden.txt"), "rb") as f:
        golden = f.read()
    put(t, "golden-256-right", b"\x01\x00" + golden)
    put(t, "golden-256-left", b"\x05\x40" + golden)
    put(t, "blank-lines", b"\x02\x08" + b"\n  1 2\t3  \n\n4\r\n")
    put(t, "out-of-vocab", b"\x00\x00" + b"0 1\n")
    put(t, "not-a-number", b"\x03\x00" + b"1 2x 3\n")


def seeds_case(tdiff, work):
    t = "case_h5"
    model, case = os.path.join(work, "model"), os.path.join(work, "case.h5")
    quiet = dict(check=True, capture_output=True)  # progress lines go to stderr
    subprocess.run([tdiff, "synth", "--preset", "tiny", "--seed", "1", "-o", model], **quiet)
    subprocess.run([tdiff, "case", "new", "--model", model, "--random-prompts", "2", "--len", "3", "--seed", "1",
                    "-o", case], **quiet)
    with open(case, "rb") as f:
        put(t, "inputs-only", f.read())
    subprocess.run([tdiff, "golden", case, "--stages", "embed"], **quiet)
    with open(case, "rb") as f:
        put(t, "reference-embed", f.read())
    subprocess.run([tdiff, "run", case, "--backend", "emu", "--stages", "embed", "-o", os.path.join(work, "rep")],
                   **quiet)
    with open(case, "rb") as f:
        put(t, "run-recorded", f.read())
    # Layer 0's stages: 28 links under /reference, HDF5's dense link storage (more than 8),
    # where libhdf5 1.10 aborted on damaged metadata; the whole reference (153 stages) took
    # seconds per input under ASan.
    subprocess.run([tdiff, "golden", case, "--stages", "L00*"], **quiet)
    with open(case, "rb") as f:
        put(t, "reference-dense", f.read())
    # legacy-reference-embed is kept as it is: a case written before the integrity record
    # existed (no user block), which tdiff reads unchecked.


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tdiff", required=True, help="the tdiff binary (for the config and case seeds)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tdiff-seeds-")
    try:
        seeds_safetensors()
        seeds_index()
        seeds_release_scales()
        seeds_config(a.tdiff, work)
        seeds_policy()
        seeds_suite()
        seeds_tokens()
        seeds_case(a.tdiff, work)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
