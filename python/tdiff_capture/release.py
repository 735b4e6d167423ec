"""DeepSeek's release layout read into transformers' (HF) layout: how tdiff-capture loads a
release folder (FP8 linears, FP4 experts, release names, shards) into DeepseekV4ForCausalLM,
and how bench/hip/bench_hf.py benchmarks transformers on one.

The release (model-spec §1.3, 2.6, 2.7; tdiff's src/formats/release_format.*,
release_weights.cpp, config.cpp and synth_release.cpp are the authority this mirrors):

    FP8 linear  W [O, K]: codes F8_E4M3 [O, K], scale F8_E8M0 (or F32) [ceil(O/128), ceil(K/128)]
                          W[o, k] = e4m3(code[o, k]) * 2^(e[o/128, k/128] - 127)
    FP4 expert  W [O, K]: codes I8 [O, ceil(K/2)] (low nibble = even column), scale F8_E8M0 [O, ceil(K/32)]
                          W[o, k] = e2m1(code[o, k]) * 2^(e[o, k/32] - 127)
    everything else BF16, F32 or I64 with no scale; `mtp.*` is not part of the forward pass.

Each product is exact in float32 (a code of at most 4 significant bits times a power of two,
inside float32's range for any scale a checkpoint uses), and so is its cast to bf16 or
float64: a model built in any of those dtypes holds exactly the release's values. The routed
experts, E release tensors per part, stack into HF's gate_up_proj [E, 2I, D] (rows
[w1_e; w3_e]) and down_proj [E, D, I] (w2_e).

The dequantisers take an `ops` object (NumpyOps here, TorchOps in load_into), so the numpy
path that the tests check (python/tests/test_release_codes.py, test_release.py) is the code
the torch path runs; only build_model and load_into import torch.

    python3 -m tdiff_capture.release --export RELEASE_DIR OUT_DIR        # an HF-layout float32 copy
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# --- The code tables (exact values, float32) -------------------------------------------------


def _e4m3_table():
    t = np.zeros(256, dtype=np.float64)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        exp, man = (b >> 3) & 0xF, b & 0x7
        if exp == 0xF and man == 0x7:
            t[b] = np.nan  # S.1111.111; no infinities
        elif exp == 0:
            t[b] = sign * math.ldexp(man, -9)  # subnormal: man/8 * 2^-6
        else:
            t[b] = sign * math.ldexp(8 + man, exp - 10)  # (1 + man/8) * 2^(exp-7)
    return t.astype(np.float32)


E4M3 = _e4m3_table()
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
# 2^(e-127); e = 0 is 2^-127, a float32 subnormal (exact); 0xFF is NaN.
E8M0 = np.array([math.ldexp(1.0, e - 127) for e in range(255)] + [math.nan], dtype=np.float32)
TABLES = {"e4m3": E4M3, "e2m1": E2M1, "e8m0": E8M0}


class NumpyOps:
    """The array operations the dequantisers use, on numpy arrays."""

    def take(self, table, codes):
        return TABLES[table][codes]

    def repeat(self, x, n, axis):
        return np.repeat(x, n, axis=axis)

    def stack(self, xs, axis):
        return np.stack(xs, axis=axis)

    def is_f32(self, x):
        return x.dtype == np.float32

    def any_nan(self, x):
        return bool(np.isnan(x).any())


class TorchOps:
    """The same operations on torch tensors (on `device`): the GPU path of the loader."""

    def __init__(self, device):
        import torch
        self.torch = torch
        self.tables = {k: torch.from_numpy(v.copy()).to(device) for k, v in TABLES.items()}

    def take(self, table, codes):
        return self.tables[table][codes.long()]  # a uint8 index would be a boolean mask

    def repeat(self, x, n, axis):
        return x.repeat_interleave(n, dim=axis)

    def stack(self, xs, axis):
        return self.torch.stack(xs, dim=axis)

    def is_f32(self, x):
        return x.dtype == self.torch.float32

    def any_nan(self, x):
        return bool(self.torch.isnan(x).any())


def dequantize_fp8(codes, scale, ops, what="fp8"):
    """codes uint8 (E4M3 bytes) [..., O, K]; scale uint8 (E8M0 bytes) or float32 [..., ceil(O/128), ceil(K/128)].
    Returns float32 [..., O, K]."""
    O, K = codes.shape[-2], codes.shape[-1]
    want = (-(-O // 128), -(-K // 128))
    if tuple(scale.shape[-2:]) != want:
        raise ValueError("%s: scale has shape %s, the weight [%d, %d] needs %s" % (what, tuple(scale.shape), O, K, want))
    s = scale if ops.is_f32(scale) else ops.take("e8m0", scale)
    s = ops.repeat(ops.repeat(s, 128, -2)[..., :O, :], 128, -1)[..., :K]
    w = ops.take("e4m3", codes) * s
    if ops.any_nan(w):
        raise ValueError("%s: a NaN code or scale" % what)
    return w


def dequantize_fp4(packed, scale, K, ops, what="fp4"):
    """packed uint8 [..., O, ceil(K/2)] (two E2M1 codes a byte, low nibble = even column);
    scale uint8 (E8M0 bytes) [..., O, ceil(K/32)]. Returns float32 [..., O, K]."""
    if packed.shape[-1] != -(-K // 2) or tuple(scale.shape[-2:]) != (packed.shape[-2], -(-K // 32)):
        raise ValueError("%s: codes %s / scale %s do not fit %d columns" % (what, tuple(packed.shape), tuple(scale.shape), K))
    codes = ops.stack([packed & 0x0F, packed >> 4], -1)
    codes = codes.reshape(tuple(packed.shape[:-1]) + (2 * packed.shape[-1],))[..., :K]
    s = ops.repeat(ops.take("e8m0", scale), 32, -1)[..., :K]
    w = ops.take("e2m1", codes) * s
    if ops.any_nan(w):
        raise ValueError("%s: a NaN scale" % what)
    return w


# --- safetensors, read with numpy -------------------------------------------------------------

ST_NUMPY = {"F8_E4M3": np.uint8, "F8_E8M0": np.uint8, "I8": np.uint8, "U8": np.uint8, "BF16": np.uint16,
            "F16": np.float16, "F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}


class Safetensors:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        self.header, self.start = header, 8 + n
        self._map = None

    def array(self, name):
        """(safetensors dtype, a read-only numpy view of the stored bytes in their container type)."""
        h = self.header[name]
        if h["dtype"] not in ST_NUMPY:
            raise ValueError("%s: tensor %s has dtype %s, not one this reader knows" % (self.path, name, h["dtype"]))
        if self._map is None:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        a, b = h["data_offsets"]
        dt = ST_NUMPY[h["dtype"]]
        return h["dtype"], self._map[self.start + a:self.start + b].view(dt).reshape(h["shape"])


def bf16_to_f32(u16):
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """Round to nearest even (finite values), as torch casts."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


# --- names (model-spec §2.1-2.5, 2.7; release_format.cpp's tables) --------------------------------------

TOP = {"embed.weight": "model.embed_tokens.weight", "hc_head_fn": "model.hc_head.hc_fn",
       "hc_head_base": "model.hc_head.hc_base", "hc_head_scale": "model.hc_head.hc_scale",
       "norm.weight": "model.norm.weight", "head.weight": "lm_head.weight"}
LAYER = {
    "hc_attn_fn": "attn_hc.fn", "hc_attn_base": "attn_hc.base", "hc_attn_scale": "attn_hc.scale",
    "hc_ffn_fn": "ffn_hc.fn", "hc_ffn_base": "ffn_hc.base", "hc_ffn_scale": "ffn_hc.scale",
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn.wq_a.weight": "self_attn.q_a_proj.weight", "attn.q_norm.weight": "self_attn.q_a_norm.weight",
    "attn.wq_b.weight": "self_attn.q_b_proj.weight", "attn.wkv.weight": "self_attn.kv_proj.weight",
    "attn.kv_norm.weight": "self_attn.kv_norm.weight", "attn.wo_a.weight": "self_attn.o_a_proj.weight",
    "attn.wo_b.weight": "self_attn.o_b_proj.weight", "attn.attn_sink": "self_attn.sinks",
    "attn.compressor.wkv.weight": "self_attn.compressor.kv_proj.weight",
    "attn.compressor.wgate.weight": "self_attn.compressor.gate_proj.weight",
    "attn.compressor.ape": "self_attn.compressor.position_bias",
    "attn.compressor.norm.weight": "self_attn.compressor.kv_norm.weight",
    "attn.indexer.compressor.wkv.weight": "self_attn.compressor.indexer.kv_proj.weight",
    "attn.indexer.compressor.wgate.weight": "self_attn.compressor.indexer.gate_proj.weight",
    "attn.indexer.compressor.ape": "self_attn.compressor.indexer.position_bias",
    "attn.indexer.compressor.norm.weight": "self_attn.compressor.indexer.kv_norm.weight",
    "attn.indexer.wq_b.weight": "self_attn.compressor.indexer.q_b_proj.weight",
    "attn.indexer.weights_proj.weight": "self_attn.compressor.indexer.scorer.weights_proj.weight",
    "ffn.gate.weight": "mlp.gate.weight", "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
    "ffn.gate.tid2eid": "mlp.gate.tid2eid",
    "ffn.shared_experts.w1.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn.shared_experts.w3.weight": "mlp.shared_experts.up_proj.weight",
    "ffn.shared_experts.w2.weight": "mlp.shared_experts.down_proj.weight",
}
EXPERT_PARTS = {"w1": ("mlp.experts.gate_up_proj", 0), "w3": ("mlp.experts.gate_up_proj", 1),
                "w2": ("mlp.experts.down_proj", 0)}


def _split_layer(name, prefix):
    """"<prefix><digits>.<rest>" -> (digits, rest), else None."""
    if not name.startswith(prefix):
        return None
    i = len(prefix)
    while i < len(name) and name[i].isdigit():
        i += 1
    if i == len(prefix) or i >= len(name) or name[i] != ".":
        return None
    return name[len(prefix):i], name[i + 1:]


def hf_name(release):
    """The HF name of a release tensor (routed experts: their stacked tensor); None outside the model."""
    if release in TOP:
        return TOP[release]
    layer = _split_layer(release, "layers.")
    if layer is None:
        return None
    index, rest = layer
    expert = _split_layer(rest, "ffn.experts.")
    if expert is not None:
        part = expert[1][:-len(".weight")] if expert[1].endswith(".weight") else None
        return "model.layers.%s.%s" % (index, EXPERT_PARTS[part][0]) if part in EXPERT_PARTS else None
    return "model.layers.%s.%s" % (index, LAYER[rest]) if rest in LAYER else None


def scale_name(weight_name):
    return weight_name[:-len(".weight")] + ".scale" if weight_name.endswith(".weight") else weight_name + ".scale"


# --- the folder ----------------------------------------------------------------------------------


class Param:
    """One HF parameter and where the release stores it. kind: plain | fp8 | experts."""

    def __init__(self, hf, kind):
        self.hf, self.kind = hf, kind
        self.tensor = None          # plain, fp8: the release weight name
        self.experts = {}           # experts: {e: {part: release weight name}}
        self.parts = ()             # experts: ("w1", "w3") or ("w2",)
        self.shape = None           # the HF shape
        self.dtype = None           # plain: the stored dtype (BF16, F32, I64, ...)


class ReleaseFolder:
    def __init__(self, model_dir):
        self.dir = model_dir
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        index = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.isfile(index):
            with open(index) as f:
                self.weight_map = json.load(f)["weight_map"]
        else:
            st = Safetensors(os.path.join(model_dir, "model.safetensors"))
            self.weight_map = {k: "model.safetensors" for k in st.header}
        self._files = {}

    def file(self, name):
        shard = self.weight_map[name]
        if shard not in self._files:
            self._files[shard] = Safetensors(os.path.join(self.dir, shard))
        return self._files[shard]

    def array(self, name):
        return self.file(name).array(name)

    def info(self, name):
        return self.file(name).header[name]

    def params(self):
        """{HF name: Param} for every release tensor of the forward pass; ValueError for a
        tensor it cannot place (outside mtp.* and the scales) or a malformed tensor."""
        out, unknown = {}, []
        for name in sorted(self.weight_map):
            if name.startswith("mtp."):
                continue
            hf = hf_name(name)
            if hf is None:
                if name.endswith(".scale") and name[:-len(".scale")] + ".weight" in self.weight_map:
                    continue
                unknown.append(name)
                continue
            info = self.info(name)
            if hf.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
                p = out.setdefault(hf, Param(hf, "experts"))
                e_str, part_w = _split_layer(_split_layer(name, "layers.")[1], "ffn.experts.")
                p.experts.setdefault(int(e_str), {})[part_w[:-len(".weight")]] = name
                p.parts = ("w1", "w3") if hf.endswith("gate_up_proj") else ("w2",)
                continue
            kind = "fp8" if scale_name(name) in self.weight_map else "plain"
            p = Param(hf, kind)
            p.tensor, p.shape, p.dtype = name, tuple(info["shape"]), info["dtype"]
            if kind == "fp8" and info["dtype"] != "F8_E4M3":
                raise ValueError("%s: tensor %s has a scale but dtype %s (FP8 weights are F8_E4M3)" % (self.dir, name, info["dtype"]))
            if kind == "plain" and info["dtype"] == "F8_E4M3":
                raise ValueError("%s: tensor %s is F8_E4M3 without a scale" % (self.dir, name))
            out[hf] = p
        if unknown:
            raise ValueError("%s: release tensors with no HF name: %s" % (self.dir, ", ".join(unknown[:8])))
        for p in out.values():
            if p.kind != "experts":
                continue
            E = len(p.experts)
            if sorted(p.experts) != list(range(E)):
                raise ValueError("%s: %s: experts %s are not 0..%d" % (self.dir, p.hf, sorted(p.experts)[:8], E - 1))
            rows, K = None, None
            for e in range(E):
                for part in p.parts:
                    w = p.experts[e].get(part)
                    if w is None:
                        raise ValueError("%s: %s: expert %d has no %s" % (self.dir, p.hf, e, part))
                    r, k = self.expert_dims(w)
                    if (rows, K) not in ((None, None), (r, k)):
                        raise ValueError("%s: %s is [%d, %d], the other experts [%d, %d]" % (self.dir, w, r, k, rows, K))
                    rows, K = r, k
            p.shape = (E, rows * len(p.parts), K)
        return out

    def expert_dims(self, w):
        """The logical [rows, K] of an expert tensor: FP4 (I8 codes + scale) or stored as floats."""
        info = self.info(w)
        rows, cols = info["shape"]
        if scale_name(w) not in self.weight_map:
            return rows, cols
        if info["dtype"] != "I8":
            raise ValueError("%s: %s has a scale but dtype %s (FP4 experts are packed in I8)" % (self.dir, w, info["dtype"]))
        groups = self.info(scale_name(w))["shape"][1]
        # Two codes a byte: K is 2*cols, or 2*cols - 1 when the per-32 groups say so.
        K = 2 * cols if -(-2 * cols // 32) == groups else 2 * cols - 1
        return rows, K

    # Values, through `ops` (numpy here, torch on the GPU in load_into). `to` moves a numpy array
    # where ops works (identity for numpy).

    def plain_value(self, p, to):
        """A plain tensor in its container dtype: BF16 as uint16 bits, others as stored."""
        dt, a = self.array(p.tensor)
        return dt, to(np.array(a))

    def fp8_value(self, p, ops, to):
        _, codes = self.array(p.tensor)
        sdt, scale = self.array(scale_name(p.tensor))
        if sdt not in ("F8_E8M0", "F32"):
            raise ValueError("%s: %s has dtype %s, expected F8_E8M0 or F32" % (self.dir, scale_name(p.tensor), sdt))
        return dequantize_fp8(to(np.array(codes)), to(np.array(scale)), ops, p.tensor)

    def experts_value(self, p, e0, e1, ops, to):
        """Experts e0..e1-1 of a stacked parameter, float32 [e1-e0, rows, K]."""
        E, R, K = p.shape
        chunks = []
        for part in p.parts:
            names = [p.experts[e][part] for e in range(e0, e1)]
            if scale_name(names[0]) in self.weight_map:
                codes = to(np.stack([self.array(n)[1] for n in names]))
                scale = to(np.stack([self.array(scale_name(n))[1] for n in names]))
                chunks.append(dequantize_fp4(codes, scale, K, ops, "%s (%s, experts %d..%d)" % (p.hf, part, e0, e1 - 1)))
            else:  # an unquantised export of the experts
                vals = []
                for n in names:
                    dt, a = self.array(n)
                    vals.append(bf16_to_f32(a) if dt == "BF16" else np.asarray(a, dtype=np.float32))
                chunks.append(to(np.stack(vals)))
        return chunks[0] if len(chunks) == 1 else ops.stack(chunks, 1).reshape((e1 - e0, R, K))

    def value_f32(self, p):
        """The whole HF tensor with numpy: float32 (int64 for integer tensors)."""
        ops, to = NumpyOps(), (lambda a: a)
        if p.kind == "experts":
            return self.experts_value(p, 0, p.shape[0], ops, to)
        if p.kind == "fp8":
            return self.fp8_value(p, ops, to)
        dt, a = self.plain_value(p, to)
        if dt == "BF16":
            return bf16_to_f32(a)
        return a if dt in ("I64", "I32") else a.astype(np.float32)


def is_release_layout(model_dir):
    """As tdiff decides (release_weights.cpp): the folder has a tensor named embed.weight."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            return "embed.weight" in json.load(f).get("weight_map", {})
    single = os.path.join(model_dir, "model.safetensors")
    return os.path.isfile(single) and "embed.weight" in Safetensors(single).header


# --- the config (config.cpp's parse_config, legacy keys; model-spec §1.3) ---------------------------------

LAYER_TYPE_OF_RATIO = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
RELEASE_ONLY = ("compress_ratios", "num_hash_layers", "compress_rate_csa", "compress_rate_hca", "quantization_config",
                "num_nextn_predict_layers", "topk_method", "expert_dtype")


def hf_config(release):
    """The HF config dict (the keys tdiff synth --format hf writes) of a release config.json:
    compress_ratios (one more entry for the MTP layer; 0/4/128 choose the type) -> layer_types,
    num_hash_layers (default 3) -> mlp_layer_types, qk_rope_head_dim -> partial_rotary_factor,
    compress_rates made explicit (defaults {4, 128}, legacy compress_rate_csa/hca), and the
    quantisation and MTP keys dropped (the weights given to the model are dequantised)."""
    c = dict(release)
    L = int(c["num_hidden_layers"])
    if c.get("layer_types") is None:
        ratios = c.get("compress_ratios")
        if ratios is not None:
            if len(ratios) < L:
                raise ValueError("compress_ratios has %d entries, num_hidden_layers is %d" % (len(ratios), L))
            bad = [r for r in ratios[:L] if r not in LAYER_TYPE_OF_RATIO]
            if bad:
                raise ValueError("compress_ratios holds %s (allowed: 0, 4, 128)" % bad[0])
            c["layer_types"] = [LAYER_TYPE_OF_RATIO[r] for r in ratios[:L]]
        else:  # HF's default schedule (V4-Pro's), as tdiff reads it
            c["layer_types"] = ["heavily_compressed_attention" if i < 2 or i % 2 == 0 else "compressed_sparse_attention"
                                for i in range(L)]
    if c.get("mlp_layer_types") is None:
        nh = c.get("num_hash_layers")
        nh = 3 if nh is None else int(nh)
        c["mlp_layer_types"] = ["hash_moe" if i < nh else "moe" for i in range(L)]
    rates = dict(c.get("compress_rates") or {})
    rates.setdefault("compressed_sparse_attention", 4)
    rates.setdefault("heavily_compressed_attention", 128)
    if c.get("compress_rate_csa") is not None:
        rates["compressed_sparse_attention"] = int(c["compress_rate_csa"])
    if c.get("compress_rate_hca") is not None:
        rates["heavily_compressed_attention"] = int(c["compress_rate_hca"])
    c["compress_rates"] = rates
    if c.get("partial_rotary_factor") is None:
        rope = c.get("qk_rope_head_dim")
        rope = int(c["head_dim"]) // 8 if rope is None else int(rope)
        c["partial_rotary_factor"] = rope / int(c["head_dim"])
    for k in RELEASE_ONLY:
        c.pop(k, None)
    return c


# --- an HF-layout copy (for the checks; tdiff reads it) --------------------------------------------


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: numpy array (float32 or int64)}."""
    names = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}
    header, off, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        b = a.tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def export_hf(release_dir, out_dir):
    """The release model as an HF-layout folder: every tensor dequantised, float32 (tid2eid
    int64), the HF config. Returns {HF name: array}."""
    rel = ReleaseFolder(release_dir)
    tensors = {hf: rel.value_f32(p) for hf, p in rel.params().items()}
    os.makedirs(out_dir, exist_ok=True)
    cfg = hf_config(rel.config)
    cfg["torch_dtype"] = "float32"
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    return tensors


# --- the GPU path --------------------------------------------------------------------------------

EXPERT_CHUNK_ELEMENTS = 1 << 27  # float32 values dequantised at once (0.5 GB, plus the int64 index)


def load_into(rel, state, device, chunk_elements=EXPERT_CHUNK_ELEMENTS):
    """Fills `state` (the model's state_dict: {HF name: tensor on `device`}, filled in place)
    from the release folder, tensor by tensor, dequantising on the device. Every release
    tensor must land (ValueError otherwise: a naming mismatch); a model tensor the release
    lacks is left as built and named in the result, as from_pretrained leaves a missing key.
    Returns {"tensors": n, "stored_bytes": bytes read, "not_in_release": [names]}."""
    import torch
    ops = TorchOps(device)

    def to(a):
        return torch.from_numpy(a).to(device)

    params = rel.params()
    missing = sorted(set(state) - set(params))
    extra = sorted(set(params) - set(state))
    if extra:
        raise ValueError("%s: %d release tensors have no place in the model (%s); the model has %d the release lacks (%s)"
                         % (rel.dir, len(extra), ", ".join(extra[:6]), len(missing), ", ".join(missing[:6])))
    stored = 0
    with torch.no_grad():
        for hf, p in params.items():
            dst = state[hf]
            if p.kind == "experts":
                if tuple(dst.shape) != p.shape:
                    raise ValueError("%s: the model's %s is %s, the release's experts make %s" % (rel.dir, hf, tuple(dst.shape), p.shape))
                per = max(1, chunk_elements // (p.shape[1] * p.shape[2]))
                for e0 in range(0, p.shape[0], per):
                    e1 = min(p.shape[0], e0 + per)
                    dst[e0:e1].copy_(rel.experts_value(p, e0, e1, ops, to))
                for e in range(p.shape[0]):
                    for part in p.parts:
                        w = p.experts[e][part]
                        stored += _nbytes(rel, w) + (_nbytes(rel, scale_name(w)) if scale_name(w) in rel.weight_map else 0)
                continue
            if tuple(dst.shape) != p.shape:
                raise ValueError("%s: the model's %s is %s, the release's %s is %s" % (rel.dir, hf, tuple(dst.shape), p.tensor, p.shape))
            if p.kind == "fp8":
                dst.copy_(rel.fp8_value(p, ops, to))
                stored += _nbytes(rel, p.tensor) + _nbytes(rel, scale_name(p.tensor))
            else:
                dt, a = rel.plain_value(p, lambda x: x)
                t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if dt == "BF16" else torch.from_numpy(a)
                dst.copy_(t.to(device))
                stored += _nbytes(rel, p.tensor)
    return {"tensors": len(params), "stored_bytes": stored, "not_in_release": missing}


def build_model(model_dir, dtype, device):
    """DeepseekV4ForCausalLM in `dtype` on `device`, its tensors from the release folder
    `model_dir`: the HF config built from the release one, the model built where it runs (the
    weights are overwritten, so nothing is materialised twice and no float32 copy of the model
    exists on the host), then every tensor filled by load_into (FP8/FP4 dequantised on
    `device`). Returns (model in eval mode, info: what was loaded and how long it took)."""
    import time

    import torch
    import transformers
    t0 = time.perf_counter()
    rel = ReleaseFolder(model_dir)
    cfg = hf_config(rel.config)
    config = transformers.DeepseekV4Config.from_dict(cfg)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            try:
                model = transformers.DeepseekV4ForCausalLM._from_config(config, dtype=dtype)
            except TypeError:  # an older signature (torch_dtype), or none
                model = transformers.DeepseekV4ForCausalLM._from_config(config)
    finally:
        torch.set_default_dtype(prev)
    built_dtypes = sorted({str(p.dtype) for p in model.parameters()})
    # The dtypes from_pretrained gives an HF-layout folder, and hf.load_model then (model-spec §3.10):
    # every parameter in `dtype`; the buffers as transformers built them (the rotary modules'
    # inv_freq float32: in bf16 they moved RoPE angles by up to a radian at 2300 tokens), but
    # those the class keeps in float32 (the routers' e_score_correction_bias: in bf16 the
    # selections move).
    cast_parameters(model, dtype)
    kept = keep_buffers_in_float32(model, dtype)
    t1 = time.perf_counter()
    stats = load_into(rel, model.state_dict(), device)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    t2 = time.perf_counter()
    info = {"layout": "release", "load_s": round(t2 - t0, 2), "build_s": round(t1 - t0, 2),
            "fill_s": round(t2 - t1, 2), "release_tensors_filled": stats["tensors"],
            "release_stored_gb": round(stats["stored_bytes"] / 1e9, 3),
            "model_tensors_not_in_release": stats["not_in_release"], "built_param_dtypes": built_dtypes,
            "buffers_kept_float32": kept,
            "layer_types": list(cfg["layer_types"]), "mlp_layer_types": list(cfg["mlp_layer_types"])}
    return model.eval(), info


def cast_parameters(model, dtype):
    """Every floating-point parameter of `model` not in `dtype` cast to it, buffers left alone;
    returns the names cast."""
    cast = [n for n, p in model.named_parameters() if p.is_floating_point() and p.dtype != dtype]
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)
    return cast


def keep_buffers_in_float32(model, dtype):
    """The floating buffers from_pretrained keeps in float32 whatever `dtype`: those named by
    the class's _keep_in_fp32_modules_strict (and _keep_in_fp32_modules under float16), matched
    as transformers matches them (whole dotted components). Returns their names."""
    import re

    import torch
    names = list(getattr(model, "_keep_in_fp32_modules_strict", None) or [])
    if dtype == torch.float16:
        names += list(getattr(model, "_keep_in_fp32_modules", None) or [])
    if not names:
        return []
    pattern = re.compile("|".join(r"((^|\.)%s($|\.))" % re.escape(n) for n in names))
    kept = []
    for module_name, module in model.named_modules():
        for name, buf in list(module._buffers.items()):
            full = "%s.%s" % (module_name, name) if module_name else name
            if buf is not None and buf.is_floating_point() and buf.dtype != torch.float32 and pattern.search(full):
                module._buffers[name] = buf.float()
                kept.append(full)
    return kept


def _nbytes(rel, name):
    a, b = rel.info(name)["data_offsets"]
    return b - a


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", nargs=2, metavar=("RELEASE_DIR", "OUT_DIR"), required=True,
                    help="write an HF-layout float32 copy of the release folder")
    a = ap.parse_args()
    t = export_hf(*a.export)
    print("wrote %s: %d tensors" % (a.export[1], len(t)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
