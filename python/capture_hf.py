#!/usr/bin/env python3
"""Capture transformers' DeepseekV4ForCausalLM stage by stage, under tdiff's stage names.

Runs the Hugging Face model in float64 on the CPU (eager attention, eager experts) on the
inputs of a tdiff case file and writes every stage output that the module boundaries
expose as /<stage>/<tensor> in an HDF5 file, e.g. /L01.attn.core/o, /lm_head/logits, so that

    tdiff compare case.h5 hf.h5 --group-a /reference --group-b /

diffs the float64 reference against transformers. See python/README.md for the mapping of
modules to stages, what is derived and what cannot be captured.

Needs torch, transformers (5.17), h5py and numpy; runs on the CPU only.

Usage:
    python3 python/capture_hf.py --model DIR --case case.h5 -o hf.h5 [--stages PATTERN]
    python3 python/capture_hf.py --print-mapping      # the module -> stage table (no torch needed)

Exit codes (as tdiff's): 0 success; 1 a self-check failed (shapes that are not tdiff's, or
--hidden-states-check disagreeing), the dump is written all the same; 2 bad usage or bad
input (no output file is left behind); 3 an internal error.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import sys
import tempfile
import time
import traceback

EXIT_OK, EXIT_CHECK, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

# Imported in main() so that --help and --print-mapping work without them.
np = None
h5py = None
torch = None
F = None


class InputError(Exception):
    """Bad usage or bad input: exit code 2."""


# ---------------------------------------------------------------------------------------
# The module -> stage table. One row per tensor: (stage, tensor, HF module, how, kind).
# "Lxx" stands for the layer ("L00", "L01", ...), "{l}" for its index in module paths.
# how: "output" / "input" are plain hook captures (plus the reshape named); "derived: ..."
# recomputes one expression of the HF source on captured tensors (bitwise HF's value);
# "wrap: ..." comes from wrapping the module-level eager_attention_forward function.
# kind: f = float64 dataset, i = int64 dataset, b = bool (uint8 + attribute dtype="bool").
# ---------------------------------------------------------------------------------------
_LAYER = "model.layers.{l}"
_ATTN = _LAYER + ".self_attn"
_CMP = _ATTN + ".compressor"
_IDX = _CMP + ".indexer"
_MLP = _LAYER + ".mlp"
_WRAP = "eager_attention_forward (module == " + _ATTN + ")"

MAPPING = [
    ("embed", "e", "model.embed_tokens", "output", "f"),
    ("hc.expand", "X", "model.layers.0", "input 0 (hidden_states) of layer 0", "f"),
    ("rope.main", "cos", "model.rotary_emb", "output[0] of the call with layer_type='main'", "f"),
    ("rope.main", "sin", "model.rotary_emb", "output[1] of the call with layer_type='main'", "f"),
    ("rope.compress", "cos", "model.rotary_emb", "output[0] of the call with layer_type='compress'", "f"),
    ("rope.compress", "sin", "model.rotary_emb", "output[1] of the call with layer_type='compress'", "f"),
    ("mask.window", "mask", "model.layers.0",
     "input kwarg attention_mask [B,1,S,S] of layer 0, == 0 (additive mask -> visible)", "b"),
    # attention half
    ("Lxx.hc_attn.mix", "mix", _LAYER + ".attn_hc",
     "derived: F.linear(attn_hc.input_norm output, fn.float())", "f"),
    ("Lxx.hc_attn.sinkhorn", "pre", _LAYER + ".attn_hc",
     "derived: sigmoid(mix[..., :n] * scale[0] + base[:n]) + hc_eps", "f"),
    ("Lxx.hc_attn.sinkhorn", "post", _LAYER + ".attn_hc", "output[0]", "f"),
    ("Lxx.hc_attn.sinkhorn", "comb", _LAYER + ".attn_hc", "output[1]", "f"),
    ("Lxx.hc_attn.pre", "x", _LAYER + ".attn_hc", "output[2] (collapsed)", "f"),
    ("Lxx.attn_norm", "h", _LAYER + ".input_layernorm", "output", "f"),
    ("Lxx.attn.q_a", "out", _ATTN + ".q_a_proj", "output", "f"),
    ("Lxx.attn.q_a_norm", "q_res", _ATTN + ".q_a_norm", "output", "f"),
    ("Lxx.attn.q_b", "out", _ATTN + ".q_b_proj", "output [B,S,H*d] -> [B,S,H,d]", "f"),
    ("Lxx.attn.q_norm", "out", _ATTN + ".q_b_norm", "output [B,H,S,d] -> transpose(1, 2)", "f"),
    ("Lxx.attn.q_rope", "q", _WRAP, "wrap: query [B,H,S,d] -> transpose(1, 2)", "f"),
    ("Lxx.attn.kv", "out", _ATTN + ".kv_proj", "output", "f"),
    ("Lxx.attn.kv_norm", "out", _ATTN + ".kv_norm", "output", "f"),
    ("Lxx.attn.kv_rope", "kv", _WRAP, "wrap: key[:, 0, :S] (key = [sliding kv ; compressed entries])", "f"),
    ("Lxx.attn.cmp.proj", "P", _CMP + ".kv_proj", "output", "f"),
    ("Lxx.attn.cmp.proj", "Z", _CMP + ".gate_proj", "output", "f"),
    ("Lxx.attn.cmp.pool", "out", _CMP + ".kv_norm", "input 0 (forward pre-hook)", "f"),
    ("Lxx.attn.cmp.norm", "out", _CMP + ".kv_norm", "output", "f"),
    ("Lxx.attn.cmp.rope", "C", _CMP, "output[0] [B,1,n,d] -> [:, 0]", "f"),
    ("Lxx.attn.idx.proj", "P", _IDX + ".kv_proj", "output", "f"),
    ("Lxx.attn.idx.proj", "Z", _IDX + ".gate_proj", "output", "f"),
    ("Lxx.attn.idx.pool", "out", _IDX + ".kv_norm", "input 0 (forward pre-hook)", "f"),
    ("Lxx.attn.idx.norm", "out", _IDX + ".kv_norm", "output", "f"),
    ("Lxx.attn.idx.rope", "KI", _IDX + ".scorer", "input 1 (compressed_kv, forward pre-hook)", "f"),
    ("Lxx.attn.idx.q", "out", _IDX + ".q_b_proj", "output [B,S,H_I*d_I] -> [B,S,H_I,d_I]", "f"),
    ("Lxx.attn.idx.q_rope", "QI", _IDX + ".scorer", "input 0 (q, forward pre-hook)", "f"),
    ("Lxx.attn.idx.weights", "w", _IDX + ".scorer.weights_proj",
     "derived: output.float() * scorer.weights_scaling", "f"),
    ("Lxx.attn.idx.score", "score", _IDX + ".scorer",
     "derived: output.masked_fill(w >= (position_ids + 1) // m, -inf)", "f"),
    ("Lxx.attn.idx.topk", "sel", _IDX, "output; each row sorted ascending, -1 (invalid) last", "i"),
    ("Lxx.attn.cmp.mask", "mask", _CMP,
     "output[1] [B,1,S,n] == 0 (block bias -> visible); None (no entries) -> [B,S,0]", "b"),
    ("Lxx.attn.core", "o", _WRAP, "wrap: output[0] [B,S,H,d]", "f"),
    ("Lxx.attn.o_rope", "out", _ATTN + ".o_a_proj",
     "input 0 [B,S,G,H*d/G] -> [B,S,H,d] (forward pre-hook)", "f"),
    ("Lxx.attn.o_a", "out", _ATTN + ".o_a_proj", "output [B,S,G,R_o] -> [B,S,G*R_o]", "f"),
    ("Lxx.attn.o_b", "a", _ATTN + ".o_b_proj", "output", "f"),
    ("Lxx.hc_attn.post", "X", _LAYER + ".ffn_hc", "input 0 (hidden_streams)", "f"),
    # MoE half
    ("Lxx.hc_ffn.mix", "mix", _LAYER + ".ffn_hc",
     "derived: F.linear(ffn_hc.input_norm output, fn.float())", "f"),
    ("Lxx.hc_ffn.sinkhorn", "pre", _LAYER + ".ffn_hc",
     "derived: sigmoid(mix[..., :n] * scale[0] + base[:n]) + hc_eps", "f"),
    ("Lxx.hc_ffn.sinkhorn", "post", _LAYER + ".ffn_hc", "output[0]", "f"),
    ("Lxx.hc_ffn.sinkhorn", "comb", _LAYER + ".ffn_hc", "output[1]", "f"),
    ("Lxx.hc_ffn.pre", "x", _LAYER + ".ffn_hc", "output[2] (collapsed)", "f"),
    ("Lxx.ffn_norm", "z", _LAYER + ".post_attention_layernorm", "output", "f"),
    ("Lxx.moe.router", "logit", _MLP + ".gate", "output[0] [B*S,E]", "f"),
    ("Lxx.moe.router", "score", _MLP + ".gate", "derived: gate.score_fn(output[0])", "f"),
    ("Lxx.moe.select", "idx", _MLP + ".gate",
     "output[2]; top-k layers: reordered by descending score + bias, ties by lower id; "
     "hash layers: tid2eid order, as is", "i"),
    ("Lxx.moe.select", "idx_sorted", _MLP + ".gate", "output[2], each row sorted by expert id (extra)", "i"),
    ("Lxx.moe.weights", "wt", _MLP + ".gate", "output[1], in the order of moe.select/idx", "f"),
    ("Lxx.moe.weights", "wt_sorted", _MLP + ".gate",
     "output[1], in the order of moe.select/idx_sorted (extra)", "f"),
    ("Lxx.moe.experts", "routed", _MLP + ".experts", "output [B*S,D]", "f"),
    ("Lxx.moe.shared", "shared", _MLP + ".shared_experts", "output [B,S,D] -> [B*S,D]", "f"),
    ("Lxx.moe.out", "f", _MLP, "output", "f"),
    ("Lxx.hc_ffn.post", "X", _LAYER, "output", "f"),
    # epilogue
    ("final.hc_head", "y", "model.hc_head", "output", "f"),
    ("final.hc_head", "preh", "model.hc_head",
     "derived: sigmoid(F.linear(hc_head.input_norm output, hc_fn.float()) * hc_scale.float() "
     "+ hc_base.float()) + eps", "f"),
    ("final.norm", "out", "model.norm", "output", "f"),
    ("lm_head", "logits", "lm_head", "output", "f"),
]
MAP = {(row[0], row[1]): row for row in MAPPING}
EXTRA_TENSORS = {("Lxx.moe.select", "idx_sorted"), ("Lxx.moe.weights", "wt_sorted")}

CONVENTIONS = (
    "Layout /<stage>/<tensor> as tdiff's stage graph. Float tensors are float64 (HF float32 "
    "values are widened exactly), indices int64, masks uint8 with attribute dtype=bool. "
    "Lxx.moe.select/idx and Lxx.moe.weights/wt: top-k layers in descending (score + routing "
    "bias) order, ties by the lower expert id (the reference's order; HF's own topk order is "
    "unspecified); hash layers in tid2eid order. idx_sorted / wt_sorted: the same rows sorted "
    "by expert id (extra tensors, not in the reference). Lxx.attn.idx.topk/sel: each row "
    "sorted ascending, -1 (not causal) last. Lxx.attn.idx.score: -inf where w >= "
    "(pos + 1) // m. Derived tensors recompute one HF expression on captured tensors.")

LAYER_TYPES = {"sliding_attention": "sliding", "compressed_sparse_attention": "csa",
               "heavily_compressed_attention": "hca"}


def stage_class(stage: str):
    """'L03.attn.core' -> ('Lxx.attn.core', 3); 'lm_head' -> ('lm_head', None)."""
    m = re.match(r"^L(\d+)\.(.*)$", stage)
    if m:
        return "Lxx." + m.group(2), int(m.group(1))
    return stage, None


def stage_graph(layer_types, mlp_types):
    """[(stage, [tensors])] in the order of src/core/stage_graph.cpp."""
    g = [("embed", ["e"]), ("hc.expand", ["X"]), ("rope.main", ["cos", "sin"]),
         ("rope.compress", ["cos", "sin"]), ("mask.window", ["mask"])]
    for l, lt in enumerate(layer_types):
        kind = LAYER_TYPES[lt]
        L = "L%02d." % l
        g += [(L + "hc_attn.mix", ["mix"]), (L + "hc_attn.sinkhorn", ["pre", "post", "comb"]),
              (L + "hc_attn.pre", ["x"]), (L + "attn_norm", ["h"]),
              (L + "attn.q_a", ["out"]), (L + "attn.q_a_norm", ["q_res"]), (L + "attn.q_b", ["out"]),
              (L + "attn.q_norm", ["out"]), (L + "attn.q_rope", ["q"]),
              (L + "attn.kv", ["out"]), (L + "attn.kv_norm", ["out"]), (L + "attn.kv_rope", ["kv"])]
        if kind != "sliding":
            g += [(L + "attn.cmp.proj", ["P", "Z"]), (L + "attn.cmp.pool", ["out"]),
                  (L + "attn.cmp.norm", ["out"]), (L + "attn.cmp.rope", ["C"])]
            if kind == "csa":
                g += [(L + "attn.idx.proj", ["P", "Z"]), (L + "attn.idx.pool", ["out"]),
                      (L + "attn.idx.norm", ["out"]), (L + "attn.idx.rope", ["KI"]),
                      (L + "attn.idx.q", ["out"]), (L + "attn.idx.q_rope", ["QI"]),
                      (L + "attn.idx.weights", ["w"]), (L + "attn.idx.score", ["score"]),
                      (L + "attn.idx.topk", ["sel"])]
            g += [(L + "attn.cmp.mask", ["mask"])]
        g += [(L + "attn.core", ["o"]), (L + "attn.o_rope", ["out"]), (L + "attn.o_a", ["out"]),
              (L + "attn.o_b", ["a"]), (L + "hc_attn.post", ["X"]),
              (L + "hc_ffn.mix", ["mix"]), (L + "hc_ffn.sinkhorn", ["pre", "post", "comb"]),
              (L + "hc_ffn.pre", ["x"]), (L + "ffn_norm", ["z"]),
              (L + "moe.router", ["logit", "score"]), (L + "moe.select", ["idx"]),
              (L + "moe.weights", ["wt"]), (L + "moe.experts", ["routed"]),
              (L + "moe.shared", ["shared"]), (L + "moe.out", ["f"]), (L + "hc_ffn.post", ["X"])]
    g += [("final.hc_head", ["y", "preh"]), ("final.norm", ["out"]), ("lm_head", ["logits"])]
    return g


def expected_shapes(cfg, B, S):
    """{(stage class, tensor): shape function of the layer's compression rate}, spec section 9."""
    D, n_hc = cfg["hidden_size"], cfg["hc_mult"]
    H, d, r = cfg["num_attention_heads"], cfg["head_dim"], cfg["rope_dim"]
    HI, dI = cfg["index_n_heads"], cfg["index_head_dim"]
    N = B * S
    E, K = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    fixed = {
        ("embed", "e"): (B, S, D), ("hc.expand", "X"): (B, S, n_hc, D),
        ("rope.main", "cos"): (B, S, r // 2), ("rope.main", "sin"): (B, S, r // 2),
        ("rope.compress", "cos"): (B, S, r // 2), ("rope.compress", "sin"): (B, S, r // 2),
        ("mask.window", "mask"): (B, S, S),
        ("Lxx.attn_norm", "h"): (B, S, D), ("Lxx.ffn_norm", "z"): (B, S, D),
        ("Lxx.attn.q_a", "out"): (B, S, cfg["q_lora_rank"]),
        ("Lxx.attn.q_a_norm", "q_res"): (B, S, cfg["q_lora_rank"]),
        ("Lxx.attn.q_b", "out"): (B, S, H, d), ("Lxx.attn.q_norm", "out"): (B, S, H, d),
        ("Lxx.attn.q_rope", "q"): (B, S, H, d),
        ("Lxx.attn.kv", "out"): (B, S, d), ("Lxx.attn.kv_norm", "out"): (B, S, d),
        ("Lxx.attn.kv_rope", "kv"): (B, S, d),
        ("Lxx.attn.idx.proj", "P"): (B, S, 2 * dI), ("Lxx.attn.idx.proj", "Z"): (B, S, 2 * dI),
        ("Lxx.attn.idx.q", "out"): (B, S, HI, dI), ("Lxx.attn.idx.q_rope", "QI"): (B, S, HI, dI),
        ("Lxx.attn.idx.weights", "w"): (B, S, HI),
        ("Lxx.attn.core", "o"): (B, S, H, d), ("Lxx.attn.o_rope", "out"): (B, S, H, d),
        ("Lxx.attn.o_a", "out"): (B, S, cfg["o_groups"] * cfg["o_lora_rank"]),
        ("Lxx.attn.o_b", "a"): (B, S, D),
        ("Lxx.moe.router", "logit"): (N, E), ("Lxx.moe.router", "score"): (N, E),
        ("Lxx.moe.select", "idx"): (N, K), ("Lxx.moe.select", "idx_sorted"): (N, K),
        ("Lxx.moe.weights", "wt"): (N, K), ("Lxx.moe.weights", "wt_sorted"): (N, K),
        ("Lxx.moe.experts", "routed"): (N, D), ("Lxx.moe.shared", "shared"): (N, D),
        ("Lxx.moe.out", "f"): (B, S, D),
        ("final.hc_head", "y"): (B, S, D), ("final.hc_head", "preh"): (B, S, n_hc),
        ("final.norm", "out"): (B, S, D), ("lm_head", "logits"): (B, S, cfg["vocab_size"]),
    }
    for site in ("hc_attn", "hc_ffn"):
        fixed[("Lxx.%s.mix" % site, "mix")] = (B, S, (2 + n_hc) * n_hc)
        fixed[("Lxx.%s.sinkhorn" % site, "pre")] = (B, S, n_hc)
        fixed[("Lxx.%s.sinkhorn" % site, "post")] = (B, S, n_hc)
        fixed[("Lxx.%s.sinkhorn" % site, "comb")] = (B, S, n_hc, n_hc)
        fixed[("Lxx.%s.pre" % site, "x")] = (B, S, D)
        fixed[("Lxx.%s.post" % site, "X")] = (B, S, n_hc, D)

    def shape(stage, tensor):
        cls, layer = stage_class(stage)
        if (cls, tensor) in fixed:
            return fixed[(cls, tensor)]
        if layer is None or layer >= len(cfg["layer_types"]):
            return None
        kind = LAYER_TYPES[cfg["layer_types"][layer]]
        if kind == "sliding":
            return None
        rate = cfg["rate"][kind]
        n = S // rate
        c = 2 if kind == "csa" else 1
        per_layer = {
            ("Lxx.attn.cmp.proj", "P"): (B, S, c * d), ("Lxx.attn.cmp.proj", "Z"): (B, S, c * d),
            ("Lxx.attn.cmp.pool", "out"): (B, n, d), ("Lxx.attn.cmp.norm", "out"): (B, n, d),
            ("Lxx.attn.cmp.rope", "C"): (B, n, d), ("Lxx.attn.cmp.mask", "mask"): (B, S, n),
            ("Lxx.attn.idx.pool", "out"): (B, n, dI), ("Lxx.attn.idx.norm", "out"): (B, n, dI),
            ("Lxx.attn.idx.rope", "KI"): (B, n, dI), ("Lxx.attn.idx.score", "score"): (B, S, n),
            ("Lxx.attn.idx.topk", "sel"): (B, S, min(cfg["index_topk"], n)),
        }
        return per_layer.get((cls, tensor))

    return shape


def pattern_matches(pattern: str, name: str) -> bool:
    """tdiff's stage patterns: fnmatch globs separated by commas; empty matches everything."""
    if not pattern:
        return True
    return any(part and fnmatch.fnmatchcase(name, part) for part in pattern.split(","))


# ---------------------------------------------------------------------------------------
# Case file
# ---------------------------------------------------------------------------------------
def _attr_text(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, list):
        return "\n".join(_attr_text(x) for x in v)
    return str(v)


def read_case(path):
    if not os.path.isfile(path):
        raise InputError("%s: no such case file" % path)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise InputError("%s: not an HDF5 file (%s)" % (path, e))
    with f:
        for name in ("ids", "mask"):
            if "inputs/" + name not in f:
                raise InputError("%s: no dataset '/inputs/%s' (not a tdiff case file?)" % (path, name))
        ids = np.asarray(f["inputs/ids"][()])
        mask = np.asarray(f["inputs/mask"][()])
        pos = np.asarray(f["inputs/pos"][()]) if "inputs/pos" in f else None
        root_attrs = {k: _attr_text(v) for k, v in f.attrs.items()}
        input_attrs = {k: _attr_text(v) for k, v in f["inputs"].attrs.items()}
    if ids.ndim != 2 or ids.dtype.kind not in "iu":
        raise InputError("%s: '/inputs/ids' must be a 2-D integer dataset, found %s %s"
                         % (path, ids.dtype, list(ids.shape)))
    if mask.shape != ids.shape:
        raise InputError("%s: '/inputs/mask' has shape %s, '/inputs/ids' %s"
                         % (path, list(mask.shape), list(ids.shape)))
    if mask.dtype.kind == "f" or not np.isin(mask.astype(np.int64), (0, 1)).all():
        raise InputError("%s: '/inputs/mask' must hold 0/1 (bool), found %s" % (path, mask.dtype))
    ids = ids.astype(np.int64)
    mask = mask.astype(np.int64) != 0
    B, S = ids.shape
    if pos is None:
        pos = np.broadcast_to(np.arange(S, dtype=np.int64), (B, S)).copy()
    elif pos.shape != ids.shape or pos.dtype.kind not in "iu":
        raise InputError("%s: '/inputs/pos' must be an integer dataset shaped like '/inputs/ids'" % path)
    return ids, mask, pos.astype(np.int64), root_attrs, input_attrs


def check_right_padding(mask, path):
    """transformers reproduces the model only for right padding (spec 5.12): refuse others."""
    for b, row in enumerate(mask):
        real = np.flatnonzero(row)
        if real.size == 0:
            continue
        first, last = int(real[0]), int(real[-1])
        if real.size != last - first + 1:
            raise InputError("%s: row %d: the real tokens are not contiguous in '/inputs/mask'" % (path, b))
        if first != 0:
            raise InputError(
                "%s: row %d is left-padded (its first real token is at index %d). transformers' "
                "DeepSeek-V4 computes the model only for right padding: with left padding its "
                "compressors pool the pad tokens and the compression windows are shifted "
                "(spec 5.12), so it is no oracle there. Make the case with --pad-side right."
                % (path, b, first))


# ---------------------------------------------------------------------------------------
# Capture
# ---------------------------------------------------------------------------------------
class CaptureError(Exception):
    pass


def _hc_maps(hc, flat):
    """DeepseekV4HyperConnection.forward's pre/post from its input_norm output (same code)."""
    n = hc.hc_mult
    mix = F.linear(flat, hc.fn.float())
    pre_w, post_w, _ = mix.split([n, n, n * n], dim=-1)
    pre_b, post_b, _ = hc.base.split([n, n, n * n])
    pre_scale, post_scale, _ = hc.scale.unbind(0)
    pre = torch.sigmoid(pre_w * pre_scale + pre_b) + hc.hc_eps
    post = 2 * torch.sigmoid(post_w * post_scale + post_b)
    return mix, pre, post


def _canonical_sel(sel):
    """Indexer picks per row ascending, -1 (invalid) last: tdiff's canonical order."""
    if sel.numel() == 0:
        return sel
    big = torch.iinfo(sel.dtype).max
    s = sel.masked_fill(sel < 0, big)
    s = torch.sort(s, dim=-1).values
    return s.masked_fill(s == big, -1)


def _visible(mask):
    """An additive (0 = visible) or boolean (True = visible) attention mask -> bool."""
    return mask if mask.dtype == torch.bool else mask == 0


class Recorder:
    def __init__(self, h5, graph, shape_of, pattern, derive, wrap, keep_streams):
        self.h5 = h5
        self.graph = graph
        self.shape_of = shape_of
        self.pattern = pattern
        self.derive = derive
        self.wrap = wrap
        self.keep_streams = keep_streams  # for --hidden-states-check
        self.meta = {}        # "stage/tensor" -> (shape, dtype name, module, how)
        self.tmp = {}         # values passed from one hook to a later one
        self.kept = {}        # streams kept for --hidden-states-check
        self.checks = []      # (what, max |a - b|) of the self-consistency checks
        self.shape_errors = []
        self.handles = []
        self.restore = []
        self.wrap_layers = set()
        self.notes = []
        self._want = {}
        self.put_s = 0.0      # seconds spent converting and writing captured tensors

    # -- bookkeeping ---------------------------------------------------------------------
    def want(self, stage):
        w = self._want.get(stage)
        if w is None:
            w = self._want[stage] = pattern_matches(self.pattern, stage)
        return w

    def put(self, stage, tensor, value):
        if not self.want(stage):
            return
        t0 = time.perf_counter()
        try:
            self._put(stage, tensor, value)
        finally:
            self.put_s += time.perf_counter() - t0

    def _put(self, stage, tensor, value):
        key = "%s/%s" % (stage, tensor)
        if key in self.meta:
            raise CaptureError("%s was captured twice: a module ran more than once in the forward "
                               "(is a cache in use?)" % key)
        cls, layer = stage_class(stage)
        row = MAP.get((cls, tensor))
        if row is None:
            raise CaptureError("%s: no row in the mapping table" % key)
        module = row[2].format(l=layer) if layer is not None else row[2]
        kind = row[4]
        t = value.detach()
        if kind == "f":
            arr = t.to(device="cpu", dtype=torch.float64, copy=True).numpy()
        elif kind == "i":
            arr = t.to(device="cpu", dtype=torch.int64, copy=True).numpy()
        else:
            arr = t.to(device="cpu").bool().to(dtype=torch.uint8, copy=True).numpy()
        arr = np.ascontiguousarray(arr)
        expected = self.shape_of(stage, tensor)
        if expected is not None and tuple(arr.shape) != tuple(expected):
            self.shape_errors.append("%s: shape %s, tdiff's is %s" % (key, list(arr.shape), list(expected)))
        # Ids, selections and masks are compressed; float tensors are not (as tdiff stores its
        # own: deflate gains little on float64 and took most of the time of a large capture).
        opts = {}
        if arr.size and arr.nbytes >= (1 << 20) and kind != "f":
            opts = dict(compression="gzip", compression_opts=1, shuffle=True)
        ds = self.h5.create_dataset(key, data=arr, **opts)
        if kind == "b":
            ds.attrs["dtype"] = "bool"
        ds.attrs["hf_module"] = module
        ds.attrs["how"] = row[3]
        self.meta[key] = (tuple(arr.shape), {"f": "f64", "i": "i64", "b": "bool"}[kind], module, row[3])

    def check(self, what, a, b):
        """Records max |a - b| of two tensors that HF's code makes equal (bitwise expected)."""
        if tuple(a.shape) != tuple(b.shape):
            self.checks.append((what, "shape %s vs %s" % (list(a.shape), list(b.shape))))
            return
        diff = 0.0
        if a.numel():
            diff = float((a.double() - b.double()).abs().nan_to_num(nan=float("inf")).max())
        self.checks.append((what, diff))

    # -- hook plumbing -------------------------------------------------------------------
    def on_output(self, module, fn, with_kwargs=False):
        """fn(module, args, kwargs, output) -> iterable of (stage, tensor, value) or None."""
        def hook(mod, args, *rest):
            kwargs, out = (rest[0], rest[1]) if with_kwargs else ({}, rest[0])
            for item in fn(mod, args, kwargs, out) or ():
                self.put(*item)
        if with_kwargs:
            h = module.register_forward_hook(hook, with_kwargs=True)
        else:
            h = module.register_forward_hook(hook)
        self.handles.append(h)

    def on_input(self, module, fn, with_kwargs=False):
        """fn(module, args, kwargs) -> iterable of (stage, tensor, value) or None."""
        def hook(mod, args, *rest):
            kwargs = rest[0] if with_kwargs else {}
            for item in fn(mod, args, kwargs) or ():
                self.put(*item)
            return None
        if with_kwargs:
            h = module.register_forward_pre_hook(hook, with_kwargs=True)
        else:
            h = module.register_forward_pre_hook(hook)
        self.handles.append(h)

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        for undo in reversed(self.restore):
            undo()
        self.restore = []

    # -- installation --------------------------------------------------------------------
    def install(self, model, hf_module):
        m = model.model
        self.on_output(m.embed_tokens, lambda mod, a, kw, out: [("embed", "e", out)])

        def rope(mod, args, kwargs, out):
            layer_type = kwargs.get("layer_type", args[2] if len(args) > 2 else None)
            if layer_type not in ("main", "compress"):
                self.notes.append("model.rotary_emb called with layer_type=%r: ignored" % (layer_type,))
                return None
            return [("rope." + layer_type, "cos", out[0]), ("rope." + layer_type, "sin", out[1])]
        self.on_output(m.rotary_emb, rope, with_kwargs=True)

        def first_layer_input(mod, args, kwargs):
            streams = args[0] if args else kwargs["hidden_states"]
            if self.keep_streams:
                self.kept["hc.expand/X"] = streams.detach().clone()
            items = [("hc.expand", "X", streams)]
            mask = kwargs.get("attention_mask")
            if isinstance(mask, torch.Tensor) and mask.dim() == 4:
                S = streams.shape[1]
                vis = _visible(mask)[:, 0, :, :S]
                items.append(("mask.window", "mask", vis.expand(streams.shape[0], -1, -1)))
            else:
                self.notes.append("layer 0 got no 4-D attention_mask tensor (%s): mask.window not captured"
                                  % type(mask).__name__)
            return items
        self.on_input(m.layers[0], first_layer_input, with_kwargs=True)

        for l, layer in enumerate(m.layers):
            self.install_layer(l, layer)

        head = m.hc_head
        self.on_output(head.input_norm, self._stash(("hc_head",)))

        def hc_head(mod, args, kwargs, out):
            x = args[0]
            items = [("final.hc_head", "y", out)]
            flat = self.tmp.pop(("hc_head",), None)
            if self.derive and flat is not None:
                mixes = F.linear(flat, mod.hc_fn.float())
                pre = torch.sigmoid(mixes * mod.hc_scale.float() + mod.hc_base.float()) + mod.eps
                self.check("final.hc_head/y == collapse with derived preh",
                           (pre.unsqueeze(-1) * x).sum(dim=2).to(x.dtype), out)
                items.append(("final.hc_head", "preh", pre))
            return items
        self.on_output(head, hc_head)

        def final_norm(mod, args, kwargs, out):
            if self.keep_streams:
                self.kept["final.norm/out"] = out.detach().clone()
            return [("final.norm", "out", out)]
        self.on_output(m.norm, final_norm)
        self.on_output(model.lm_head, lambda mod, a, kw, out: [("lm_head", "logits", out)])

        if self.wrap:
            self.install_attention_wrap(hf_module)

    def _stash(self, key):
        def fn(mod, args, kwargs, out):
            self.tmp[key] = out
        return fn

    def install_layer(self, l, layer):
        L = "L%02d." % l

        def layer_out(mod, args, kwargs, out):
            if self.keep_streams:
                self.kept[L + "hc_ffn.post/X"] = out.detach().clone()
            return [(L + "hc_ffn.post", "X", out)]
        self.on_output(layer, layer_out)
        self.install_hc(layer.attn_hc, L + "hc_attn", None)
        self.install_hc(layer.ffn_hc, L + "hc_ffn", L + "hc_attn.post")
        self.on_output(layer.input_layernorm, lambda mod, a, kw, out: [(L + "attn_norm", "h", out)])
        self.on_output(layer.post_attention_layernorm, lambda mod, a, kw, out: [(L + "ffn_norm", "z", out)])
        self.install_attention(layer.self_attn, L)
        self.install_moe(layer.mlp, L)

    def install_hc(self, hc, site, stream_stage):
        key = ("hc", site)
        self.on_output(hc.input_norm, self._stash(key))

        def hc_out(mod, args, kwargs, out):
            post, comb, collapsed = out
            streams = args[0]
            flat = self.tmp.pop(key, None)
            items = []
            if stream_stage is not None:
                items.append((stream_stage, "X", streams))
            items += [(site + ".sinkhorn", "post", post), (site + ".sinkhorn", "comb", comb),
                      (site + ".pre", "x", collapsed)]
            if self.derive and flat is not None:
                mix, pre, post_again = _hc_maps(mod, flat)
                self.check(site + ".sinkhorn/post == derived post", post_again, post)
                self.check(site + ".pre/x == collapse with derived pre",
                           (pre.unsqueeze(-1) * streams).sum(dim=2).to(streams.dtype), collapsed)
                items += [(site + ".mix", "mix", mix), (site + ".sinkhorn", "pre", pre)]
            return items
        self.on_output(hc, hc_out)

    def install_attention(self, attn, L):
        H, d = attn.num_heads, attn.head_dim

        def q_b(mod, args, kwargs, out):
            return [(L + "attn.q_b", "out", out.reshape(out.shape[0], out.shape[1], H, d))]

        def o_rope(mod, args, kwargs):
            x = args[0]
            return [(L + "attn.o_rope", "out", x.reshape(x.shape[0], x.shape[1], H, d))]

        self.on_output(attn.q_a_proj, lambda mod, a, kw, out: [(L + "attn.q_a", "out", out)])
        self.on_output(attn.q_a_norm, lambda mod, a, kw, out: [(L + "attn.q_a_norm", "q_res", out)])
        self.on_output(attn.q_b_proj, q_b)
        self.on_output(attn.q_b_norm, lambda mod, a, kw, out: [(L + "attn.q_norm", "out", out.transpose(1, 2))])
        self.on_output(attn.kv_proj, lambda mod, a, kw, out: [(L + "attn.kv", "out", out)])
        self.on_output(attn.kv_norm, lambda mod, a, kw, out: [(L + "attn.kv_norm", "out", out)])
        self.on_input(attn.o_a_proj, o_rope)
        self.on_output(attn.o_a_proj, lambda mod, a, kw, out: [(L + "attn.o_a", "out", out.flatten(2))])
        self.on_output(attn.o_b_proj, lambda mod, a, kw, out: [(L + "attn.o_b", "a", out)])
        if attn.compressor is not None:
            self.install_compressor(attn.compressor, L, attn.layer_idx)

    def install_compressor(self, comp, L, layer_idx):
        csa = hasattr(comp, "indexer")
        d = comp.head_dim
        self.on_output(comp.kv_proj, lambda mod, a, kw, out: [(L + "attn.cmp.proj", "P", out)])
        self.on_output(comp.gate_proj, lambda mod, a, kw, out: [(L + "attn.cmp.proj", "Z", out)])
        self.on_input(comp.kv_norm, lambda mod, a, kw: [(L + "attn.cmp.pool", "out", a[0])])
        self.on_output(comp.kv_norm, lambda mod, a, kw, out: [(L + "attn.cmp.norm", "out", out)])

        def comp_out(mod, args, kwargs, out):
            compressed_kv, block_bias = out
            entries = compressed_kv[:, 0]                      # [B, n, d]
            B, n = entries.shape[0], entries.shape[1]
            S = args[2].shape[1]                              # position_ids [B, S]
            if self.wrap:
                self.tmp[("C", layer_idx)] = entries
            items = [(L + "attn.cmp.rope", "C", entries)]
            if block_bias is not None:
                items.append((L + "attn.cmp.mask", "mask", _visible(block_bias)[:, 0]))
            elif n == 0:
                items.append((L + "attn.cmp.mask", "mask", torch.zeros(B, S, 0, dtype=torch.bool)))
            else:
                self.notes.append("%sattn.cmp.mask: the compressor returned no block bias for %d entries" % (L, n))
            if n == 0:  # no complete window: HF skips the pooling and its norm altogether
                empty = entries.new_zeros((B, 0, d))
                items += [(L + "attn.cmp.pool", "out", empty), (L + "attn.cmp.norm", "out", empty)]
            return items
        self.on_output(comp, comp_out)
        if csa:
            self.install_indexer(comp.indexer, L)

    def install_indexer(self, ix, L):
        HI, dI, rate = ix.num_heads, ix.head_dim, ix.compress_rate
        key = ("score", L)
        self.on_output(ix.kv_proj, lambda mod, a, kw, out: [(L + "attn.idx.proj", "P", out)])
        self.on_output(ix.gate_proj, lambda mod, a, kw, out: [(L + "attn.idx.proj", "Z", out)])
        self.on_input(ix.kv_norm, lambda mod, a, kw: [(L + "attn.idx.pool", "out", a[0])])
        self.on_output(ix.kv_norm, lambda mod, a, kw, out: [(L + "attn.idx.norm", "out", out)])
        self.on_output(ix.q_b_proj, lambda mod, a, kw, out: [
            (L + "attn.idx.q", "out", out.reshape(out.shape[0], out.shape[1], HI, dI))])

        def scorer_in(mod, args, kwargs):
            q, compressed_kv = args[0], args[1]               # [B,S,H_I,d_I], [B,n,d_I]
            items = [(L + "attn.idx.q_rope", "QI", q), (L + "attn.idx.rope", "KI", compressed_kv)]
            if compressed_kv.shape[1] == 0:  # no complete window: pooling and norm skipped
                empty = compressed_kv.new_zeros((compressed_kv.shape[0], 0, dI))
                items += [(L + "attn.idx.pool", "out", empty), (L + "attn.idx.norm", "out", empty)]
            return items
        self.on_input(ix.scorer, scorer_in)

        def weights(mod, args, kwargs, out):
            if not self.derive:
                return None
            return [(L + "attn.idx.weights", "w", out.float() * ix.scorer.weights_scaling)]
        self.on_output(ix.scorer.weights_proj, weights)
        self.on_output(ix.scorer, self._stash(key))

        def indexer_out(mod, args, kwargs, out):
            items = [(L + "attn.idx.topk", "sel", _canonical_sel(out))]
            scores = self.tmp.pop(key, None)
            if self.derive and scores is not None:
                position_ids = args[2]
                n = scores.shape[-1]
                if n > 0:
                    threshold = (position_ids + 1) // rate
                    entries = torch.arange(n, device=scores.device)
                    future = entries.view(1, 1, -1) >= threshold.unsqueeze(-1)
                    scores = scores.masked_fill(future, float("-inf"))
                items.append((L + "attn.idx.score", "score", scores))
            return items
        self.on_output(ix, indexer_out)

    def install_moe(self, mlp, L):
        def gate(mod, args, kwargs, out):
            logits, weights, indices = out
            scores = mod.score_fn(logits)
            items = [(L + "moe.router", "logit", logits)]
            if self.derive:
                items.append((L + "moe.router", "score", scores))
            idx = indices.long()
            idx_np = idx.cpu().numpy()
            if hasattr(mod, "e_score_correction_bias"):   # learned top-k: tdiff's order
                biased = scores + mod.e_score_correction_bias
                vals = biased.gather(1, idx).double().cpu().numpy()
                order = np.lexsort((idx_np, -vals), axis=-1)
            else:                                         # hash routing: tid2eid order is tdiff's
                order = np.broadcast_to(np.arange(idx_np.shape[1]), idx_np.shape)
            order = torch.from_numpy(np.ascontiguousarray(order)).to(idx.device)
            by_id = torch.from_numpy(np.ascontiguousarray(np.argsort(idx_np, axis=-1, kind="stable"))).to(idx.device)
            items += [(L + "moe.select", "idx", idx.gather(1, order)),
                      (L + "moe.select", "idx_sorted", idx.gather(1, by_id)),
                      (L + "moe.weights", "wt", weights.gather(1, order)),
                      (L + "moe.weights", "wt_sorted", weights.gather(1, by_id))]
            return items
        self.on_output(mlp.gate, gate)
        self.on_output(mlp.experts, lambda mod, a, kw, out: [(L + "moe.experts", "routed", out)])
        self.on_output(mlp.shared_experts, lambda mod, a, kw, out: [
            (L + "moe.shared", "shared", out.reshape(-1, out.shape[-1]))])
        self.on_output(mlp, lambda mod, a, kw, out: [(L + "moe.out", "f", out)])

    def install_attention_wrap(self, hf_module):
        """Wraps the module-level eager_attention_forward, which DeepseekV4Attention.forward
        looks up at call time (ALL_ATTENTION_FUNCTIONS.get_interface("eager", default))."""
        original = getattr(hf_module, "eager_attention_forward", None)
        if original is None:
            self.notes.append("%s has no eager_attention_forward: attn.core, q_rope, kv_rope not captured"
                              % hf_module.__name__)
            return
        rec = self

        def eager_attention_forward(module, query, key, value, attention_mask, *args, **kwargs):
            out = original(module, query, key, value, attention_mask, *args, **kwargs)
            rec.on_attention(module, query, key, out[0])
            return out

        hf_module.eager_attention_forward = eager_attention_forward
        self.restore.append(lambda: setattr(hf_module, "eager_attention_forward", original))

    def on_attention(self, module, query, key, attn_output):
        l = module.layer_idx
        L = "L%02d." % l
        self.wrap_layers.add(l)
        S = query.shape[2]                                   # query [B,H,S,d]; key [B,1,S+n,d]
        entries = self.tmp.pop(("C", l), None)
        if entries is not None:
            self.check(L + "attn.cmp.rope/C == key[:, 0, S:]", key[:, 0, S:], entries)
        for item in [(L + "attn.q_rope", "q", query.transpose(1, 2)),
                     (L + "attn.kv_rope", "kv", key[:, 0, :S]),
                     (L + "attn.core", "o", attn_output)]:
            self.put(*item)

    # -- after the forward -----------------------------------------------------------------
    def missing(self):
        """{"class/tensor": {"reason": ..., "layers": [...]}} for wanted tensors not captured."""
        out = {}
        for stage, tensors in self.graph:
            if not self.want(stage):
                continue
            cls, layer = stage_class(stage)
            for t in tensors:
                if "%s/%s" % (stage, t) in self.meta:
                    continue
                how = MAP[(cls, t)][3]
                if how.startswith("derived") and not self.derive:
                    reason = "derived tensor, disabled by --no-derived"
                elif how.startswith("wrap") and not self.wrap:
                    reason = "needs the eager_attention_forward wrap, disabled by --no-attn-wrap"
                elif how.startswith("wrap") and layer not in self.wrap_layers:
                    reason = ("eager_attention_forward was not called for this layer "
                              "(attention implementation not eager?)")
                else:
                    reason = "not seen during the forward"
                entry = out.setdefault("%s/%s" % (cls, t), {"reason": reason, "layers": []})
                if layer is not None:
                    entry["layers"].append(layer)
        return out


# ---------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------
def load_model(model_dir):
    from transformers import DeepseekV4ForCausalLM
    notes = []
    kwargs = dict(dtype=torch.float64, attn_implementation="eager")
    try:
        model = DeepseekV4ForCausalLM.from_pretrained(model_dir, experts_implementation="eager", **kwargs)
    except (TypeError, ValueError) as e:  # a transformers without that keyword: set it below
        notes.append("from_pretrained(experts_implementation='eager') refused (%s); set after loading" % (e,))
        model = DeepseekV4ForCausalLM.from_pretrained(model_dir, **kwargs)
    model.eval()
    model.to("cpu")
    # The default grouped-GEMM experts path rejects float64 (spec 3.10): force "eager".
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation("eager")
        except Exception as e:  # noqa: BLE001 - fall back to the config attribute below
            notes.append("set_experts_implementation('eager') failed: %r" % (e,))
    if getattr(model.config, "_experts_implementation", None) != "eager":
        model.config._experts_implementation = "eager"
    for name, mod in model.named_modules():
        cfg = getattr(mod, "config", None) if type(mod).__name__ == "DeepseekV4Experts" else None
        if cfg is not None and getattr(cfg, "_experts_implementation", None) != "eager":
            cfg._experts_implementation = "eager"
            notes.append("%s: experts implementation set to eager on its own config" % name)
    return model, notes


def model_dims(config):
    rope_dim = getattr(config, "qk_rope_head_dim", None)
    if rope_dim is None:
        rope_dim = int(config.head_dim * config.partial_rotary_factor)
    return {
        "hidden_size": config.hidden_size, "hc_mult": config.hc_mult,
        "num_attention_heads": config.num_attention_heads, "head_dim": config.head_dim,
        "rope_dim": rope_dim, "q_lora_rank": config.q_lora_rank, "o_groups": config.o_groups,
        "o_lora_rank": config.o_lora_rank, "index_n_heads": config.index_n_heads,
        "index_head_dim": config.index_head_dim, "index_topk": config.index_topk,
        "n_routed_experts": config.n_routed_experts, "num_experts_per_tok": config.num_experts_per_tok,
        "vocab_size": config.vocab_size, "layer_types": list(config.layer_types),
        "rate": {"csa": config.compress_rates["compressed_sparse_attention"],
                 "hca": config.compress_rates["heavily_compressed_attention"]},
    }


def hidden_states_check(hidden_states, kept, num_layers):
    """Spec 5.11b: entry 0 = hc.expand/X, entries 1..N_L-1 = outputs of layers 0..N_L-2,
    last entry = final.norm/out. Returns (ok, lines)."""
    expected = ["hc.expand/X"] + ["L%02d.hc_ffn.post/X" % l for l in range(num_layers - 1)] + ["final.norm/out"]
    lines = []
    if hidden_states is None:
        return False, ["output_hidden_states gave no hidden_states"]
    ok = len(hidden_states) == len(expected)
    if not ok:
        lines.append("output_hidden_states has %d entries, spec 5.11b says %d" % (len(hidden_states), len(expected)))
    for i, hs in enumerate(hidden_states):
        name = expected[i] if i < len(expected) else None
        ref = kept.get(name) if name else None
        if ref is not None and tuple(ref.shape) == tuple(hs.shape) and torch.equal(ref, hs):
            lines.append("hidden_states[%d] == %s (bitwise)" % (i, name))
            continue
        ok = False
        same = [k for k, v in kept.items() if tuple(v.shape) == tuple(hs.shape) and torch.equal(v, hs)]
        if ref is not None and tuple(ref.shape) == tuple(hs.shape):
            detail = "max |diff| %.3g" % float((ref.double() - hs.double()).abs().max())
        else:
            detail = "shape %s vs %s" % (list(hs.shape), list(ref.shape) if ref is not None else None)
        lines.append("hidden_states[%d] != %s (%s); equals: %s" % (i, name, detail, ", ".join(same) or "none"))
    return ok, lines


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------
def print_mapping():
    print("| stage | tensor | HF module | how |")
    print("|---|---|---|---|")
    for stage, tensor, module, how, _ in MAPPING:
        print("| `%s` | `%s` | `%s` | %s |" % (stage, tensor, module, how))


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="capture_hf.py",
        description="Run transformers' DeepseekV4ForCausalLM (float64, CPU, eager) on a tdiff case "
                    "and write its stage outputs under tdiff's names (/<stage>/<tensor>).",
        epilog="example: python3 python/capture_hf.py --model /tmp/tiny --case /tmp/tiny.h5 -o /tmp/hf.h5\n"
               "then:    tdiff compare /tmp/tiny.h5 /tmp/hf.h5 --group-a /reference --group-b /",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model folder in the HF layout (config.json + safetensors); "
                                    "default: the case's model_path attribute")
    p.add_argument("--case", help="tdiff case file (reads /inputs/ids, /inputs/mask, /inputs/pos)")
    p.add_argument("-o", "--output", help="HDF5 file to write (replaced atomically)")
    p.add_argument("--stages", default="", help="stage pattern, tdiff's syntax: fnmatch globs separated by "
                                               "commas, e.g. 'L0[1-2].attn.*,lm_head' (default: all)")
    p.add_argument("--no-derived", action="store_true",
                   help="skip the tensors recomputed from captured ones (mix, sinkhorn/pre, preh, "
                        "router/score, idx.weights, idx.score)")
    p.add_argument("--no-attn-wrap", action="store_true",
                   help="do not wrap eager_attention_forward (then attn.q_rope, attn.kv_rope and "
                        "attn.core are not captured)")
    p.add_argument("--hidden-states-check", action="store_true",
                   help="also run with output_hidden_states=True and check that its entries equal "
                        "the hooked layer outputs bitwise (spec 5.11b); exit 1 when not")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--print-mapping", action="store_true",
                   help="print the module -> stage table (markdown) and exit")
    args = p.parse_args(argv)
    if not args.print_mapping and (not args.case or not args.output):
        p.error("--case and -o are required")
    return args


def run(args):
    global np, h5py, torch, F
    t_start = time.perf_counter()
    import numpy as _np
    import h5py as _h5py
    np, h5py = _np, _h5py

    ids, mask, pos, case_attrs, _ = read_case(args.case)
    check_right_padding(mask, args.case)
    B, S = ids.shape
    if not np.array_equal(pos, np.broadcast_to(np.arange(S), (B, S))):
        print("warning: %s: /inputs/pos is not 0..S-1 in every row; passing it as position_ids as is"
              % args.case, file=sys.stderr)
    model_dir = args.model or case_attrs.get("model_path")
    if not model_dir:
        raise InputError("no --model given and the case has no model_path attribute")
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise InputError("%s: not a model folder (no config.json)" % model_dir)
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise InputError("%s: the output folder does not exist" % out_dir)

    import torch as _torch
    import torch.nn.functional as _F
    import transformers
    torch, F = _torch, _F
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if not transformers.__version__.startswith("5.17"):
        print("warning: transformers %s; this script was written against 5.17 (the spec's version)"
              % transformers.__version__, file=sys.stderr)

    t_load = time.perf_counter()
    model, load_notes = load_model(model_dir)
    load_s = time.perf_counter() - t_load
    config = model.config
    dims = model_dims(config)
    if ids.min() < 0 or ids.max() >= config.vocab_size:
        raise InputError("%s: token ids outside 0..%d" % (args.case, config.vocab_size - 1))
    graph = stage_graph(config.layer_types, config.mlp_layer_types)
    if args.stages and not any(pattern_matches(args.stages, s) for s, _ in graph):
        raise InputError("stage pattern '%s' matches no stage of this model" % args.stages)
    shape_of = expected_shapes(dims, B, S)
    non_f64 = sorted("%s (%s)" % (n, t.dtype) for n, t in
                     list(model.named_parameters()) + list(model.named_buffers())
                     if t.is_floating_point() and t.dtype != torch.float64 and "inv_freq" not in n)
    if non_f64:
        print("warning: %d floating tensors are not float64, e.g. %s"
              % (len(non_f64), ", ".join(non_f64[:5])), file=sys.stderr)
    hf_module = sys.modules[type(model).__module__]

    fd, tmp_path = tempfile.mkstemp(dir=out_dir, prefix=".capture_hf.", suffix=".h5.tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes it 0600; give it a normal file's mode
    ok = True
    try:
        with h5py.File(tmp_path, "w") as h5:
            rec = Recorder(h5, graph, shape_of, args.stages, derive=not args.no_derived,
                           wrap=not args.no_attn_wrap, keep_streams=args.hidden_states_check)
            rec.install(model, hf_module)
            extra = {"output_hidden_states": True} if args.hidden_states_check else {}
            try:
                t_fwd = time.perf_counter()
                with torch.no_grad():
                    outputs = model(input_ids=torch.from_numpy(ids),
                                    attention_mask=torch.from_numpy(mask.astype(np.int64)),
                                    position_ids=torch.from_numpy(pos),
                                    use_cache=False, **extra)
                forward_s = time.perf_counter() - t_fwd
            finally:
                rec.remove()

            missing = rec.missing()
            hs_ok, hs_lines = True, []
            if args.hidden_states_check:
                hs_ok, hs_lines = hidden_states_check(outputs.hidden_states, rec.kept, config.num_hidden_layers)
            a = h5.attrs
            a["source"] = "transformers %s float64 eager" % transformers.__version__
            a["transformers_version"] = str(transformers.__version__)
            a["torch_version"] = str(torch.__version__)
            a["written_by"] = "python/capture_hf.py"
            a["case"] = os.path.abspath(args.case)
            a["model_path"] = os.path.abspath(model_dir)
            a["stages"] = args.stages
            a["attn_implementation"] = str(getattr(config, "_attn_implementation", None))
            a["experts_implementation"] = str(getattr(config, "_experts_implementation", None))
            a["conventions"] = CONVENTIONS
            a["mapping"] = json.dumps([{"stage": s, "tensor": t, "module": m, "how": h}
                                       for s, t, m, h, _ in MAPPING])
            a["not_captured"] = json.dumps(missing)
            a["extra_tensors"] = json.dumps(sorted("%s/%s" % k for k in EXTRA_TENSORS))
            a["self_checks"] = json.dumps([[w, d] for w, d in rec.checks if d != 0.0])
            a["shape_errors"] = json.dumps(rec.shape_errors)
            a["non_float64_tensors"] = json.dumps(non_f64)
            a["notes"] = json.dumps(load_notes + rec.notes)
            if args.hidden_states_check:
                a["hidden_states_check"] = json.dumps(hs_lines)
        os.replace(tmp_path, args.output)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise

    # One line per captured stage, in stage-graph order.
    print("# %s, B=%d S=%d -> %s" % ("transformers %s float64 eager" % transformers.__version__, B, S, args.output))
    seen = set()
    for stage, tensors in graph:
        cls, _ = stage_class(stage)
        names = list(tensors) + [t for (c, t) in sorted(EXTRA_TENSORS) if c == cls]
        parts = []
        for t in names:
            key = "%s/%s" % (stage, t)
            if key in rec.meta:
                seen.add(key)
                shape, dtype, _, how = rec.meta[key]
                tag = " derived" if how.startswith("derived") else (" wrap" if how.startswith("wrap") else "")
                parts.append("%s %s %s%s" % (t, list(shape), dtype, tag))
        if parts:
            print("%-26s %s" % (stage, "  ".join(parts)))
    extra_names = {"%s/%s" % e for e in EXTRA_TENSORS}
    n_extra = sum(1 for k in seen if "%s/%s" % (stage_class(k.split("/")[0])[0], k.split("/")[1]) in extra_names)
    wanted = sum(len(t) for s, t in graph if pattern_matches(args.stages, s))
    n_missing = sum(len(v["layers"]) or 1 for v in missing.values())
    print("# %d of the %d selected stage tensors written (+%d extra); %d not captured"
          % (len(seen) - n_extra, wanted, n_extra, n_missing))
    for name, v in sorted(missing.items()):
        layers = (" layers %s" % v["layers"]) if v["layers"] else ""
        print("# not captured: %s%s: %s" % (name, layers, v["reason"]))
    for note in load_notes + rec.notes:
        print("# note: %s" % note)
    bad_checks = [(w, d) for w, d in rec.checks if d != 0.0]
    for w, d in bad_checks:
        print("# self-check not bitwise: %s: %s" % (w, d if isinstance(d, str) else "max |diff| %.3g" % d))
    if rec.checks and not bad_checks:
        print("# self-checks: %d, all bitwise equal" % len(rec.checks))
    for line in rec.shape_errors:
        print("# SHAPE ERROR: %s" % line)
        ok = False
    for line in hs_lines:
        print("# hidden-states check: %s" % line)
    if not hs_ok:
        ok = False
    # forward: the model call less the time the hooks spent converting and writing tensors.
    print("# timing: load %.2f s, forward %.2f s, writing captured tensors %.2f s (during the forward), "
          "total %.2f s; %d torch threads" % (load_s, forward_s - rec.put_s, rec.put_s,
                                               time.perf_counter() - t_start, torch.get_num_threads()))
    return EXIT_OK if ok else EXIT_CHECK


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.print_mapping:
        print_mapping()
        return EXIT_OK
    try:
        return run(args)
    except InputError as e:
        print("error: %s" % e, file=sys.stderr)
        return EXIT_INPUT
    except CaptureError as e:
        print("internal error: %s" % e, file=sys.stderr)
        return EXIT_INTERNAL
    except Exception:  # noqa: BLE001 - transformers/torch failures: exit 3 with the traceback
        traceback.print_exc()
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
