"""The module -> stage mapping of transformers' DeepseekV4ForCausalLM, tdiff's stage graph and
shapes, and the table format that users extend for other implementations (see README.md,
"Extending the mapping").

No torch needed here: `tdiff-capture mapping` prints the table without it.
"""
from __future__ import annotations

import fnmatch
import re
from collections import namedtuple

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
    """[(stage, [tensors])] in the order of src/model/stage_graph.cpp."""
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
    """{(stage class, tensor): shape function of the layer's compression rate}, model-spec §9."""
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


def print_mapping(rows=None):
    """The table as markdown (`tdiff-capture mapping`, `capture_hf.py --print-mapping`)."""
    print("| stage | tensor | HF module | how | isolate |")
    print("|---|---|---|---|---|")
    for stage, tensor, module, how, _ in rows or MAPPING:
        print("| `%s` | `%s` | `%s` | %s | %s |" % (stage, tensor, module, how, ISOLATION.get((stage, tensor), "local")))


def missing_from_mapping(layer_types, mlp_types=None, keys=None):
    """Stage tensors of the graph that no row of the table covers: [(stage, tensor)]. `keys`
    is a set of (stage class, tensor) (default: the HF table's)."""
    keys = set(MAP) if keys is None else set(keys)
    out = []
    for stage, tensors in stage_graph(layer_types, mlp_types):
        cls, _ = stage_class(stage)
        out += [(stage, t) for t in tensors if (cls, t) not in keys]
    return out


# ---------------------------------------------------------------------------------------
# Isolation (`tdiff-capture isolate`). Every hooked module output and input of the HF table is
# recorded and then replaced by the reference's value from the case, so the next module runs on
# the reference's inputs. A stage is "local" when all of tdiff's inputs of it reach the module
# as the reference's values; "fused" when some of them are computed inside the same HF module
# (or read by HF's code from a local variable that no hook can replace): its error is then that
# of a few stages together (still on the reference's inputs of the first of them).
# ---------------------------------------------------------------------------------------
_FUSED_HC = "fused: HF's HyperConnection computes mix -> sinkhorn -> collapse in one forward"
ISOLATION = {
    ("Lxx.hc_attn.sinkhorn", "pre"): _FUSED_HC, ("Lxx.hc_attn.sinkhorn", "post"): _FUSED_HC,
    ("Lxx.hc_attn.sinkhorn", "comb"): _FUSED_HC, ("Lxx.hc_attn.pre", "x"): _FUSED_HC,
    ("Lxx.hc_ffn.sinkhorn", "pre"): _FUSED_HC, ("Lxx.hc_ffn.sinkhorn", "post"): _FUSED_HC,
    ("Lxx.hc_ffn.sinkhorn", "comb"): _FUSED_HC, ("Lxx.hc_ffn.pre", "x"): _FUSED_HC,
    ("Lxx.hc_attn.post", "X"): "local (the layer's code adds the attention output to the streams; "
                               "every operand is fed)",
    ("Lxx.hc_ffn.post", "X"): "fused with hc_attn.post: the layer's code reads its own streams variable, "
                              "which the hook on ffn_hc's input cannot replace",
    ("final.hc_head", "y"): "fused with final.hc_head/preh (one HF module)",
    ("Lxx.moe.router", "score"): "fused: the router computes logit -> score -> top-k in one forward",
    ("Lxx.moe.select", "idx"): "fused: the router computes logit -> score -> top-k in one forward",
    ("Lxx.moe.select", "idx_sorted"): "fused, as idx",
    ("Lxx.moe.weights", "wt"): "fused: the router computes logit -> score -> top-k -> weights in one forward",
    ("Lxx.moe.weights", "wt_sorted"): "fused, as wt",
    ("Lxx.attn.idx.weights", "w"): "local (fed back as reference w / weights_scaling in the projection's dtype)",
    ("Lxx.attn.idx.topk", "sel"): "local (the scorer's output is replaced by the reference's scores)",
    ("mask.window", "mask"): "exact (not fed: positions only)",
    ("Lxx.attn.cmp.mask", "mask"): "exact (not fed: positions only)",
}


# ---------------------------------------------------------------------------------------
# The generic table: for implementations other than transformers (src/... of a port, a
# serving engine's PyTorch model). One Tap per tensor; generic.Recorder hooks them. Extend by
# building a list of Taps (see README.md, "Extending the mapping").
# ---------------------------------------------------------------------------------------
Tap = namedtuple("Tap", "stage tensor module where transform kind")
Tap.__new__.__defaults__ = ("output", None, "f")
Tap.__doc__ = """One tensor of a stage, read at one hook point of one module.

stage      tdiff's stage name; "Lxx." stands for the layer ("L00." ...), e.g. "Lxx.attn.q_a"
tensor     the stage's tensor name ("out", "h", ...; `tdiff info CASE --stages` lists them)
module     the module's path in model.named_modules(); "{l}" stands for the layer index,
           e.g. "layers.{l}.attention.wq_a"
where      "output", "output[i]" (an element of a tuple output), "input[i]" (positional
           argument i, a forward pre-hook) or "kwarg:NAME" (a keyword argument)
transform  None (the value as is), "reshape" (to tdiff's shape: the reference's in the case,
           and back when isolating), "transpose(1,2)", or a name added to TRANSFORMS
kind       "f" value, "i" indices, "b" mask
"""

TRANSFORMS = {
    # name: (to_tdiff(value, shape or None), from_tdiff(reference, module_value))
    None: (lambda v, shape: v, lambda r, like: r.reshape(like.shape)),
    "reshape": (lambda v, shape: v.reshape(shape) if shape is not None else v, lambda r, like: r.reshape(like.shape)),
    "transpose(1,2)": (lambda v, shape: v.transpose(1, 2), lambda r, like: r.transpose(1, 2).reshape(like.shape)),
}

_WHERE = re.compile(r"^(output|input)(?:\[(\d+)\])?$|^kwarg:(\w+)$")


def parse_where(where):
    """'output' -> ('output', None); 'output[2]' -> ('output', 2); 'input[0]' -> ('input', 0);
    'kwarg:mask' -> ('kwarg', 'mask')."""
    m = _WHERE.match(where)
    if not m:
        raise ValueError("where '%s' is not output, output[i], input[i] or kwarg:NAME" % where)
    if m.group(3):
        return "kwarg", m.group(3)
    idx = int(m.group(2)) if m.group(2) is not None else None
    if m.group(1) == "input" and idx is None:
        idx = 0
    return m.group(1), idx


# The plain rows of the HF table as Taps: what the generic recorder can do for transformers
# by itself (the derived tensors, the attention wrap and the orderings need hf.Recorder). Also
# the template for another implementation's table.
HF_TAPS = [
    Tap("embed", "e", "model.embed_tokens"),
    Tap("Lxx.attn_norm", "h", "model.layers.{l}.input_layernorm"),
    Tap("Lxx.attn.q_a", "out", "model.layers.{l}.self_attn.q_a_proj"),
    Tap("Lxx.attn.q_a_norm", "q_res", "model.layers.{l}.self_attn.q_a_norm"),
    Tap("Lxx.attn.q_b", "out", "model.layers.{l}.self_attn.q_b_proj", "output", "reshape"),
    Tap("Lxx.attn.q_norm", "out", "model.layers.{l}.self_attn.q_b_norm", "output", "transpose(1,2)"),
    Tap("Lxx.attn.kv", "out", "model.layers.{l}.self_attn.kv_proj"),
    Tap("Lxx.attn.kv_norm", "out", "model.layers.{l}.self_attn.kv_norm"),
    Tap("Lxx.attn.o_rope", "out", "model.layers.{l}.self_attn.o_a_proj", "input[0]", "reshape"),
    Tap("Lxx.attn.o_a", "out", "model.layers.{l}.self_attn.o_a_proj", "output", "reshape"),
    Tap("Lxx.attn.o_b", "a", "model.layers.{l}.self_attn.o_b_proj"),
    Tap("Lxx.ffn_norm", "z", "model.layers.{l}.post_attention_layernorm"),
    Tap("Lxx.moe.experts", "routed", "model.layers.{l}.mlp.experts"),
    Tap("Lxx.moe.shared", "shared", "model.layers.{l}.mlp.shared_experts", "output", "reshape"),
    Tap("Lxx.moe.out", "f", "model.layers.{l}.mlp"),
    Tap("Lxx.hc_ffn.post", "X", "model.layers.{l}"),
    Tap("final.norm", "out", "model.norm"),
    Tap("lm_head", "logits", "lm_head"),
]
