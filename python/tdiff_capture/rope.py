"""--rope-f64: transformers' DeepSeek-V4 rotary tables in float64.

A deliberate deviation from stock transformers, for the oracle only: transformers computes the
RoPE frequencies, angles, cos and sin in float32 even in a float64 model (model-spec §3.3 and 3.9,
site F3), so its tables drift from the exact ones by about position x 2^-24 rad, and every
stage after them with it (tests/support/oracle/README.md: rope.main/cos 2.7e-6 at 256 tokens, 2.7e-5 at
2304). This patch replaces the forward of every rotary embedding module of the model (the
instances, not the class: the model's own, and the one each compressor and each indexer owns
for the compressed entries' and the indexer queries' positions) by the same computation in
float64 from model-spec §3.3's formulas: frequencies
omega[f] (plain, or YaRN for a table whose rope_type is "yarn"), angles p * omega[f], cos and
sin, times the module's own attention scaling, cast to the activation dtype. The rotation
itself (spec F4) stays transformers' own. The float64 frequencies are checked against the
module's float32 ones (relative 1e-6): a rope type this file does not reproduce is refused
rather than silently changed.
"""
from __future__ import annotations

import math
import types


def _param(p, *names, default=None):
    for n in names:
        if n in p and p[n] is not None:
            return p[n]
    return default


def inv_freq_f64(config, layer_type, rope_dim):
    """omega[f], f = 0 .. rope_dim/2 - 1, in float64 (model-spec §3.3) for the table `layer_type`."""
    import torch
    p = config.rope_parameters[layer_type]
    theta = float(p["rope_theta"])
    r = rope_dim
    f = torch.arange(0, r, 2, dtype=torch.float64)
    base = theta ** (-f / r)
    rope_type = p.get("rope_type", "default")
    if rope_type == "default":
        return base
    if rope_type != "yarn":
        raise ValueError("--rope-f64: rope_type '%s' of table '%s' is not reproduced (default and yarn are)"
                         % (rope_type, layer_type))
    s = float(p["factor"])
    l0 = float(_param(p, "original_max_position_embeddings",
                      default=getattr(config, "original_max_position_embeddings", None) or 0))
    if not l0:
        raise ValueError("--rope-f64: table '%s' is yarn without original_max_position_embeddings" % layer_type)
    beta_fast = float(_param(p, "beta_fast", default=32.0))
    beta_slow = float(_param(p, "beta_slow", default=1.0))

    def corr(nu):
        return r * math.log(l0 / (2 * math.pi * nu)) / (2 * math.log(theta))
    lo = max(math.floor(corr(beta_fast)), 0)
    hi = min(math.ceil(corr(beta_slow)), r - 1)
    if lo == hi:
        hi += 0.001
    idx = torch.arange(r // 2, dtype=torch.float64)
    gamma = ((idx - lo) / (hi - lo)).clamp(0, 1)
    return (1 - gamma) * base + gamma * base / s


def patch_rotary_f64(rotary, config, tolerance=1e-6):
    """Replaces `rotary.forward` (this instance only) by a float64 computation; returns a
    function that undoes it and a note per table."""
    import torch
    notes = []
    tables = {}
    for layer_type in getattr(rotary, "layer_types", []):
        inv32 = getattr(rotary, "%s_inv_freq" % layer_type)
        omega = inv_freq_f64(config, layer_type, 2 * inv32.numel())
        rel = float(((omega - inv32.double().cpu()).abs() / omega).max())
        if rel > tolerance:
            raise ValueError("--rope-f64: table '%s': the float64 frequencies differ from transformers' float32 ones "
                             "by %.3g relative (> %g): not the same formula" % (layer_type, rel, tolerance))
        tables[layer_type] = omega
        notes.append("rope-f64: table '%s' (%s) computed in float64; its float32 frequencies differed by %.2g "
                     "relative" % (layer_type, config.rope_parameters[layer_type].get("rope_type", "default"), rel))
    if not tables:
        raise ValueError("--rope-f64: the rotary embedding module has no per-table frequencies (layer_types)")

    def forward(self, x, position_ids, layer_type=None):
        omega = tables[layer_type].to(device=x.device)
        scaling = float(getattr(self, "%s_attention_scaling" % layer_type, 1.0))
        with torch.no_grad():
            angles = position_ids.to(dtype=torch.float64).unsqueeze(-1) * omega  # [B, S, r/2]
            cos = angles.cos() * scaling
            sin = angles.sin() * scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)

    had = "forward" in rotary.__dict__
    old = rotary.__dict__.get("forward")
    rotary.forward = types.MethodType(forward, rotary)

    def undo():
        if had:
            rotary.forward = old
        else:
            del rotary.forward
    return undo, notes


def patch_model_rotary_f64(model, config, tolerance=1e-6):
    """patch_rotary_f64 on every rotary embedding module of `model` (those with per-table
    frequencies: the model's, the compressors' and the indexers'); returns one function that
    undoes them all and the notes of the first plus a count. ValueError when there is none."""
    rotaries = [(n, m) for n, m in model.named_modules()
                if type(m).__name__.endswith("RotaryEmbedding") and getattr(m, "layer_types", None)]
    if not rotaries:
        raise ValueError("--rope-f64: the model has no rotary embedding module with per-table frequencies")
    undos, notes = [], []
    for i, (_, m) in enumerate(rotaries):
        undo, n = patch_rotary_f64(m, config, tolerance)
        undos.append(undo)
        if i == 0:
            notes += n
    notes.append("rope-f64: %d rotary modules patched (%s%s)" % (
        len(rotaries), ", ".join(n or "model" for n, _ in rotaries[:3]), ", ..." if len(rotaries) > 3 else ""))

    def undo_all():
        for u in reversed(undos):
            u()
    return undo_all, notes
