"""Hooks on transformers' DeepseekV4ForCausalLM: capture (every stage output under tdiff's
names, in the dtype the model held or widened to float64) and isolate (every hooked module
output and input replaced by the reference's value from the case after it is recorded, so each
module runs on the reference's inputs). The table of what is hooked where: mapping.MAPPING.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from .dump import CaptureError, InputError, from_numpy, to_numpy, write_tensor
from .mapping import ISOLATION, MAP, pattern_matches, stage_class

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


def _routing_weights(scores, idx, scale):
    """DeepseekV4TopKRouter's weights at a choice (model-spec §5.16), as its code computes them."""
    w = scores.gather(1, idx.long())
    w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return w * scale


def _tdiff_order(gate, scores, indices):
    """The permutation of each row of a router's choice into tdiff's order: biased score
    descending, then expert id; hash routing keeps tid2eid's order."""
    idx = indices.long()
    if not hasattr(gate, "e_score_correction_bias"):
        return torch.arange(idx.shape[1], device=idx.device).expand_as(idx)
    vals = (scores + gate.e_score_correction_bias).gather(1, idx).double().cpu().numpy()
    order = np.lexsort((idx.cpu().numpy(), -vals), axis=-1)
    return torch.from_numpy(np.ascontiguousarray(order)).to(idx.device)


class Recorder:
    def __init__(self, h5, graph, shape_of, pattern, derive, wrap, keep_streams, store="f64", reference=None,
                 feed=None, replay=False):
        """store: "f64" (floats widened to float64) or "native" (the dtype the model held).
        reference: the case's /reference group (h5py) to feed from, or None (a plain capture).
        feed: the stages whose outputs the model takes from the reference (a predicate on the
        stage name; default: every one, isolate; an engine request's `substituted`). replay:
        after each router and indexer the reference's choice is taken, the model's own recorded."""
        self.h5 = h5
        self.store = store
        self.reference = reference
        self.isolating = reference is not None and feed is None and not replay
        self.feed = feed or ((lambda stage: False) if replay else (lambda stage: True))
        self.replay = replay and reference is not None
        self.flips = {}       # stage -> rows whose own choice differs from the reference's (replay)
        self.fed = {}         # "stage/tensor" -> how the reference's value was fed (isolate)
        self.not_fed = {}     # "stage/tensor" -> why not
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
        arr, dtype_name, attr_dtype = to_numpy(value, kind, self.store)
        expected = self.shape_of(stage, tensor)
        if expected is not None and tuple(arr.shape) != tuple(expected):
            self.shape_errors.append("%s: shape %s, tdiff's is %s" % (key, list(arr.shape), list(expected)))
        attrs = {"hf_module": module, "how": row[3]}
        if self.isolating:
            attrs["isolation"] = ISOLATION.get((cls, tensor), "local")
        write_tensor(self.h5, key, arr, attr_dtype, attrs)
        self.meta[key] = (tuple(arr.shape), dtype_name, module, row[3])

    # -- isolate, substitute, replay: the reference's values fed in --------------------------
    def feeds(self, stage):
        """Whether `stage`'s outputs are the reference's (isolate, or a substituted stage)."""
        return self.reference is not None and self.feed(stage)

    def ref(self, stage, tensor, like, how="as is", always=False):
        """The reference's stage/tensor shaped, typed and placed like `like` when the stage is fed
        (always: even when not, replay's choices), else `like` itself; `like` too when the
        reference lacks it (noted)."""
        if self.reference is None or not (always or self.feed(stage)):
            return like
        key = "%s/%s" % (stage, tensor)
        if key not in self.reference:
            self.not_fed[key] = "no /reference/%s in the case" % key
            return like
        ds = self.reference[key]
        r = from_numpy(ds[()], dict(ds.attrs))
        if r.numel() != like.numel():
            self.not_fed[key] = "the reference has %s elements, the module %s" % (list(r.shape), list(like.shape))
            return like
        if self.feed(stage):  # replay's choices (always) are not substitutions
            self.fed[key] = how
        return r.reshape(like.shape).to(device=like.device, dtype=like.dtype)

    def ref_t12(self, stage, tensor, like):
        """As ref() for a module value [B,H,S,d] whose tdiff layout is [B,S,H,d]."""
        if not self.feeds(stage):
            return like
        t = like.transpose(1, 2)
        return self.ref(stage, tensor, t, "transpose(1, 2)").transpose(1, 2)

    def feed_out(self, module, stage, tensor, capture_view=None, transposed=False):
        """A module whose output is one stage tensor: records it (capture_view(out) when given)
        and, isolating, returns the reference's value in its place."""
        def hook(mod, args, out):
            self.put(stage, tensor, capture_view(out) if capture_view else out)
            if self.reference is None:
                return None
            return self.ref_t12(stage, tensor, out) if transposed else self.ref(stage, tensor, out)
        self.handles.append(module.register_forward_hook(hook))

    def feed_in(self, module, stage, tensor, capture_view=None):
        """A module whose input 0 is one stage tensor: records it and, isolating, replaces it."""
        def hook(mod, args):
            x = args[0]
            self.put(stage, tensor, capture_view(x) if capture_view else x)
            if self.reference is None:
                return None
            return (self.ref(stage, tensor, x),) + tuple(args[1:])
        self.handles.append(module.register_forward_pre_hook(hook))


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
        self.feed_out(m.embed_tokens, "embed", "e")

        def rope(mod, args, kwargs, out):
            layer_type = kwargs.get("layer_type", args[2] if len(args) > 2 else None)
            if layer_type not in ("main", "compress"):
                self.notes.append("model.rotary_emb called with layer_type=%r: ignored" % (layer_type,))
                return None
            self.put("rope." + layer_type, "cos", out[0])
            self.put("rope." + layer_type, "sin", out[1])
            if self.reference is None:
                return None
            return (self.ref("rope." + layer_type, "cos", out[0]), self.ref("rope." + layer_type, "sin", out[1]))
        self.handles.append(m.rotary_emb.register_forward_hook(
            lambda mod, args, kwargs, out: rope(mod, args, kwargs, out), with_kwargs=True))

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
            for item in items:
                self.put(*item)
            if self.reference is None:
                return None
            fed = self.ref("hc.expand", "X", streams)
            if args:
                return (fed,) + tuple(args[1:]), kwargs
            kwargs = dict(kwargs)
            kwargs["hidden_states"] = fed
            return args, kwargs
        self.handles.append(m.layers[0].register_forward_pre_hook(first_layer_input, with_kwargs=True))

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
            for item in items:
                self.put(*item)
            return self.ref("final.hc_head", "y", out) if self.reference is not None else None
        self.handles.append(head.register_forward_hook(lambda mod, args, out: hc_head(mod, args, {}, out)))

        def final_norm(mod, args, out):
            if self.keep_streams:
                self.kept["final.norm/out"] = out.detach().clone()
            self.put("final.norm", "out", out)
            return self.ref("final.norm", "out", out) if self.reference is not None else None
        self.handles.append(m.norm.register_forward_hook(final_norm))
        self.feed_out(model.lm_head, "lm_head", "logits")

        if self.wrap:
            self.install_attention_wrap(hf_module)

    def _stash(self, key):
        def fn(mod, args, kwargs, out):
            self.tmp[key] = out
        return fn

    def install_layer(self, l, layer):
        L = "L%02d." % l

        def layer_out(mod, args, out):
            if self.keep_streams:
                self.kept[L + "hc_ffn.post/X"] = out.detach().clone()
            self.put(L + "hc_ffn.post", "X", out)
            return self.ref(L + "hc_ffn.post", "X", out) if self.reference is not None else None
        self.handles.append(layer.register_forward_hook(layer_out))
        self.install_hc(layer.attn_hc, L + "hc_attn", None)
        self.install_hc(layer.ffn_hc, L + "hc_ffn", L + "hc_attn.post")
        self.feed_out(layer.input_layernorm, L + "attn_norm", "h")
        self.feed_out(layer.post_attention_layernorm, L + "ffn_norm", "z")
        self.install_attention(layer.self_attn, L)
        self.install_moe(layer.mlp, L)

    def install_hc(self, hc, site, stream_stage):
        key = ("hc", site)
        self.on_output(hc.input_norm, self._stash(key))

        if stream_stage is not None and self.reference is not None:
            def hc_in(mod, args):
                self.tmp[("streams", site)] = args[0]       # the computed streams, recorded below
                return (self.ref(stream_stage, "X", args[0]),) + tuple(args[1:])
            self.handles.append(hc.register_forward_pre_hook(hc_in))

        def hc_out(mod, args, kwargs, out):
            post, comb, collapsed = out
            streams = args[0]
            flat = self.tmp.pop(key, None)
            items = []
            if stream_stage is not None:
                items.append((stream_stage, "X", self.tmp.pop(("streams", site), streams)))
            items += [(site + ".sinkhorn", "post", post), (site + ".sinkhorn", "comb", comb),
                      (site + ".pre", "x", collapsed)]
            if self.derive and flat is not None:
                mix, pre, post_again = _hc_maps(mod, flat)
                self.check(site + ".sinkhorn/post == derived post", post_again, post)
                self.check(site + ".pre/x == collapse with derived pre",
                           (pre.unsqueeze(-1) * streams).sum(dim=2).to(streams.dtype), collapsed)
                items += [(site + ".mix", "mix", mix), (site + ".sinkhorn", "pre", pre)]
            for item in items:
                self.put(*item)
            if self.reference is None:
                return None
            return (self.ref(site + ".sinkhorn", "post", post), self.ref(site + ".sinkhorn", "comb", comb),
                    self.ref(site + ".pre", "x", collapsed))
        self.handles.append(hc.register_forward_hook(lambda mod, args, out: hc_out(mod, args, {}, out)))

    def install_attention(self, attn, L):
        H, d = attn.num_heads, attn.head_dim

        def heads(x):
            return x.reshape(x.shape[0], x.shape[1], H, d)

        self.feed_out(attn.q_a_proj, L + "attn.q_a", "out")
        self.feed_out(attn.q_a_norm, L + "attn.q_a_norm", "q_res")
        self.feed_out(attn.q_b_proj, L + "attn.q_b", "out", heads)
        self.feed_out(attn.q_b_norm, L + "attn.q_norm", "out", lambda out: out.transpose(1, 2), transposed=True)
        self.feed_out(attn.kv_proj, L + "attn.kv", "out")
        self.feed_out(attn.kv_norm, L + "attn.kv_norm", "out")
        self.feed_in(attn.o_a_proj, L + "attn.o_rope", "out", heads)
        self.feed_out(attn.o_a_proj, L + "attn.o_a", "out", lambda out: out.flatten(2))
        self.feed_out(attn.o_b_proj, L + "attn.o_b", "a")
        if attn.compressor is not None:
            self.install_compressor(attn.compressor, L, attn.layer_idx)

    def install_compressor(self, comp, L, layer_idx):
        csa = hasattr(comp, "indexer")
        d = comp.head_dim
        self.feed_out(comp.kv_proj, L + "attn.cmp.proj", "P")
        self.feed_out(comp.gate_proj, L + "attn.cmp.proj", "Z")
        self.feed_in(comp.kv_norm, L + "attn.cmp.pool", "out")
        self.feed_out(comp.kv_norm, L + "attn.cmp.norm", "out")

        def comp_out(mod, args, kwargs, out):
            compressed_kv, block_bias = out
            entries = compressed_kv[:, 0]                      # [B, n, d]
            B, n = entries.shape[0], entries.shape[1]
            S = args[2].shape[1]                              # position_ids [B, S]
            fed = self.ref(L + "attn.cmp.rope", "C", compressed_kv) if self.reference is not None else None
            if self.wrap:   # what the attention's keys hold: the computed entries, or the fed ones
                self.tmp[("C", layer_idx)] = entries if fed is None else fed[:, 0]
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
            for item in items:
                self.put(*item)
            return None if fed is None else (fed, block_bias)
        self.handles.append(comp.register_forward_hook(lambda mod, args, out: comp_out(mod, args, {}, out)))
        if csa:
            self.install_indexer(comp.indexer, L)

    def install_indexer(self, ix, L):
        HI, dI, rate = ix.num_heads, ix.head_dim, ix.compress_rate
        key = ("score", L)
        self.feed_out(ix.kv_proj, L + "attn.idx.proj", "P")
        self.feed_out(ix.gate_proj, L + "attn.idx.proj", "Z")
        self.feed_in(ix.kv_norm, L + "attn.idx.pool", "out")
        self.feed_out(ix.kv_norm, L + "attn.idx.norm", "out")
        self.feed_out(ix.q_b_proj, L + "attn.idx.q", "out", lambda out: out.reshape(out.shape[0], out.shape[1], HI, dI))

        def scorer_in(mod, args, kwargs):
            q, compressed_kv = args[0], args[1]               # [B,S,H_I,d_I], [B,n,d_I]
            items = [(L + "attn.idx.q_rope", "QI", q), (L + "attn.idx.rope", "KI", compressed_kv)]
            if compressed_kv.shape[1] == 0:  # no complete window: pooling and norm skipped
                empty = compressed_kv.new_zeros((compressed_kv.shape[0], 0, dI))
                items += [(L + "attn.idx.pool", "out", empty), (L + "attn.idx.norm", "out", empty)]
            for item in items:
                self.put(*item)
            if self.reference is None:
                return None
            return (self.ref(L + "attn.idx.q_rope", "QI", q), self.ref(L + "attn.idx.rope", "KI", compressed_kv)) \
                + tuple(args[2:])
        self.handles.append(ix.scorer.register_forward_pre_hook(lambda mod, args: scorer_in(mod, args, {})))

        def weights(mod, args, out):
            w = out.float() * ix.scorer.weights_scaling
            if self.derive:
                self.put(L + "attn.idx.weights", "w", w)
            if not self.feeds(L + "attn.idx.weights"):
                return None
            fed = self.ref(L + "attn.idx.weights", "w", w, "reference w / weights_scaling")
            return (fed / ix.scorer.weights_scaling).to(dtype=out.dtype)
        self.handles.append(ix.scorer.weights_proj.register_forward_hook(weights))

        def scorer_out(mod, args, out):
            self.tmp[key] = out                               # the computed scores (derived below)
            if self.reference is None:
                return None
            return self.ref(L + "attn.idx.score", "score", out, "the reference's scores (-inf where not causal)")
        self.handles.append(ix.scorer.register_forward_hook(scorer_out))

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
            for item in items:
                self.put(*item)
            if self.reference is None:
                return None
            fed = self.ref(L + "attn.idx.topk", "sel", out, "the reference's picks (ascending, -1 last)",
                           always=self.replay)
            if self.replay:
                self.count_flips(L + "attn.idx.topk", _canonical_sel(out), fed)
            return fed
        self.handles.append(ix.register_forward_hook(lambda mod, args, out: indexer_out(mod, args, {}, out)))

    def install_moe(self, mlp, L):
        if self.feeds(L + "moe.router"):
            self.feed_router_scores(mlp.gate, L)

        def gate(mod, args, kwargs, out):
            logits, weights, indices = out
            scores = mod.score_fn(logits)       # what the router chose on (the reference's when fed)
            order = _tdiff_order(mod, scores, indices)
            if self.derive:
                self.check(L + "moe.weights/wt == the scores at the choice, normalised",
                           _routing_weights(scores, indices, mod.routed_scaling_factor), weights)
            own, own_wt = indices.long().gather(1, order), weights.gather(1, order)  # tdiff's order
            idx_used, wt_used, rec_idx, rec_wt = self.routing_used(mod, L, scores, (indices, weights), (own, own_wt))
            if self.replay:
                self.count_flips(L + "moe.select", own.sort(dim=1).values, idx_used.long().sort(dim=1).values)
            by_id = rec_idx.argsort(dim=1, stable=True)
            items = [(L + "moe.router", "logit", logits)]
            if self.derive:
                items.append((L + "moe.router", "score", scores))
            items += [(L + "moe.select", "idx", own), (L + "moe.select", "idx_sorted", own.sort(dim=1).values),
                      (L + "moe.weights", "wt", rec_wt), (L + "moe.weights", "wt_sorted", rec_wt.gather(1, by_id))]
            for item in items:
                self.put(*item)
            if self.reference is None:
                return None
            return self.ref(L + "moe.router", "logit", logits), wt_used, idx_used
        self.handles.append(mlp.gate.register_forward_hook(lambda mod, args, out: gate(mod, args, {}, out)))
        self.feed_out(mlp.experts, L + "moe.experts", "routed")
        self.feed_out(mlp.shared_experts, L + "moe.shared", "shared", lambda out: out.reshape(-1, out.shape[-1]))
        self.feed_out(mlp, L + "moe.out", "f")

    def routing_used(self, mod, L, scores, hf, own):
        """What the experts get and what is recorded: (indices, weights, recorded choice,
        recorded weights). hf: the router's (indices, weights); own: the same in tdiff's order.
        Replay: rows whose own choice is the reference's keep the router's own; the others take
        the reference's choice with the weights of the model's own scores at it. A substituted
        moe.select or moe.weights: the reference's tensor (in tdiff's order), the weights then
        recomputed, or the choice put in tdiff's order."""
        (indices, weights), (own_idx, own_wt) = hf, own
        take_idx = self.replay or self.feeds(L + "moe.select")
        take_wt = self.feeds(L + "moe.weights")
        if not (take_idx or take_wt):
            return indices, weights, own_idx, own_wt
        idx = own_idx
        if take_idx:
            idx = self.ref(L + "moe.select", "idx", indices, "the reference's choice (tdiff's order)",
                           always=self.replay)
            if idx is indices:  # not in the reference (noted)
                idx = own_idx
        wt = self.ref(L + "moe.weights", "wt", weights) if take_wt else \
            _routing_weights(scores, idx, mod.routed_scaling_factor)
        if not self.replay or self.feeds(L + "moe.select") or take_wt:
            return idx, wt, idx.long(), wt
        same = (own_idx.sort(dim=1).values == idx.long().sort(dim=1).values).all(dim=1, keepdim=True)
        return (torch.where(same, indices, idx.to(indices.dtype)), torch.where(same, weights, wt),
                torch.where(same, own_idx, idx.long()), torch.where(same, own_wt, wt))

    def feed_router_scores(self, gate, L):
        """The router takes the reference's scores: its own top-k and weights then run on them
        (HF's gate calls score_fn between its logits and its top-k)."""
        fn, key = gate.score_fn, L + "moe.router/score"
        self.not_fed[key] = "the router did not call its score_fn"  # until it does

        def fed(out):
            self.not_fed.pop(key, None)
            return self.ref(L + "moe.router", "score", out)
        if isinstance(fn, torch.nn.Module):
            self.handles.append(fn.register_forward_hook(lambda mod, args, out: fed(out)))
        else:
            gate.score_fn = lambda logits: fed(fn(logits))
            self.restore.append(lambda: setattr(gate, "score_fn", fn))

    def count_flips(self, stage, own, used):
        """Replay: the rows whose own choice (sorted) differs from the one taken."""
        if own.numel() == 0 or tuple(own.shape) != tuple(used.shape):
            return
        k = own.shape[-1]
        rows = (own.reshape(-1, k) != used.reshape(-1, k).to(own.dtype)).any(dim=1)
        self.flips[stage] = (int(rows.sum()), int(rows.numel()))

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
            L = "L%02d." % module.layer_idx
            if not (rec.feeds(L + "attn.q_rope") or rec.feeds(L + "attn.kv_rope")):
                out = original(module, query, key, value, attention_mask, *args, **kwargs)
                rec.on_attention(module, query, key, out[0])
                return (rec.ref(L + "attn.core", "o", out[0]),) + tuple(out[1:])
            # q_rope and kv_rope as computed (from the fed q_norm, kv_norm and tables) are
            # recorded, the reference's are attended, and attn.core is recorded and fed.
            S = query.shape[2]
            q_fed = rec.ref_t12(L + "attn.q_rope", "q", query)
            k_fed = key.clone()
            k_fed[:, 0, :S] = rec.ref(L + "attn.kv_rope", "kv", key[:, 0, :S])
            v_fed = k_fed if (value is key or (value.shape == key.shape and torch.equal(value, key))) else value
            if v_fed is value:
                rec.notes.append("%sattention: its values are not its keys; values not fed" % L)
            out = original(module, q_fed, k_fed, v_fed, attention_mask, *args, **kwargs)
            rec.on_attention(module, query, key, out[0])
            return (rec.ref(L + "attn.core", "o", out[0]),) + tuple(out[1:])

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
    def unfed_substitutions(self):
        """A request's substituted stages none of whose tensors a hook fed, into not_fed with
        why (a stage transformers computes inside one module with the next); the exact ones
        (masks of positions only) need no feeding."""
        if self.isolating or self.reference is None:
            return
        fed_stages = {k.split("/")[0] for k in self.fed}
        for stage, tensors in self.graph:
            if not self.feed(stage) or stage in fed_stages:
                continue
            cls, _ = stage_class(stage)
            why = [ISOLATION.get((cls, t), "no hook feeds it") for t in tensors]
            if all(w.startswith("exact") for w in why):
                continue
            self.not_fed[stage] = "substituted but not fed: %s" % why[0]

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
def load_model(model_dir, dtype=None, device="cpu", experts="eager", attn="eager"):
    """DeepseekV4ForCausalLM in `dtype` (default float64) on `device`, eval mode. experts:
    "eager" (needed for float64: the default grouped-GEMM path rejects it, model-spec §3.10) or
    "default" (transformers' own choice). Floating parameters that did not load in `dtype`
    (transformers keeps some in float32) are cast to it, with a note: a plain bf16 load
    otherwise fails (model-spec §3.10); buffers (the RoPE frequencies) are left as they are."""
    from transformers import DeepseekV4ForCausalLM

    from . import release
    dtype = dtype or torch.float64
    notes = []
    kwargs = dict(dtype=dtype, attn_implementation=attn)
    if release.is_release_layout(model_dir):
        # DeepSeek's release layout: built from the release config and filled with the
        # release's tensors, FP8/FP4 dequantised exactly on `device` (release.py).
        try:
            model, info = release.build_model(model_dir, dtype, device)
        except (ValueError, KeyError, OSError) as e:
            raise InputError("%s: not a release folder tdiff-capture can load: %s" % (model_dir, e))
        model.config._attn_implementation = attn
        notes.append("release layout: %d tensors (%.3f GB stored) dequantised on %s in %.1f s%s"
                     % (info["release_tensors_filled"], info["release_stored_gb"], device, info["load_s"],
                        "; model tensors the release lacks, left as built: %s" % info["model_tensors_not_in_release"]
                        if info["model_tensors_not_in_release"] else ""))
    elif experts == "eager":
        try:
            model = DeepseekV4ForCausalLM.from_pretrained(model_dir, experts_implementation="eager", **kwargs)
        except (TypeError, ValueError) as e:  # a transformers without that keyword: set it below
            notes.append("from_pretrained(experts_implementation='eager') refused (%s); set after loading" % (e,))
            model = DeepseekV4ForCausalLM.from_pretrained(model_dir, **kwargs)
    else:
        model = DeepseekV4ForCausalLM.from_pretrained(model_dir, **kwargs)
    model.eval()
    cast = []
    if dtype != torch.float64:  # float64 loads whole (and the oracle stays as it was validated)
        cast = release.cast_parameters(model, dtype)
    if cast:
        notes.append("%d parameters loaded in another dtype were cast to %s, e.g. %s"
                     % (len(cast), str(dtype).replace("torch.", ""), ", ".join(cast[:3])))
    model.to(device)
    if experts == "eager":
        # The default grouped-GEMM experts path rejects float64 (model-spec §3.10): force "eager".
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


FAULT_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _cast_floats(value, dtype):
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, tuple):
        return tuple(_cast_floats(v, dtype) for v in value)
    return value


def inject_faults(model, specs):
    """--fault MODULE=DTYPE: the module (a name of model.named_modules(), e.g.
    model.layers.1.self_attn.o_b_proj) computes in DTYPE: its parameters and floating inputs
    cast to it, its floating outputs cast back to its input's dtype. A planted fault for a
    bisect to name. Returns one note per fault; InputError for an unknown module or dtype."""
    modules = dict(model.named_modules())
    notes = []
    for spec in specs or ():
        path, _, name = spec.partition("=")
        if name not in FAULT_DTYPES:
            raise InputError("--fault %s: DTYPE must be one of %s" % (spec, ", ".join(sorted(FAULT_DTYPES))))
        if not path or path not in modules:
            near = sorted(m for m in modules if path and m.endswith(path.rsplit(".", 1)[-1]))[:3]
            raise InputError("--fault %s: the model has no module '%s'%s" % (spec, path, (", e.g. " + ", ".join(near))
                                                                             if near else ""))
        module, dtype, seen = modules[path], FAULT_DTYPES[name], []
        module.to(dtype)

        def pre(mod, args, kwargs, dtype=dtype, seen=seen):
            first = next((a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)
            seen[:] = [first.dtype if first is not None else None]
            return _cast_floats(args, dtype), {k: _cast_floats(v, dtype) for k, v in kwargs.items()}

        def post(mod, args, kwargs, out, seen=seen):
            return _cast_floats(out, seen[0]) if seen and seen[0] is not None else out
        module.register_forward_pre_hook(pre, with_kwargs=True)
        module.register_forward_hook(post, with_kwargs=True)
        notes.append("fault planted: %s computes in %s" % (path, name))
    return notes


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
        lines.append("output_hidden_states has %d entries, model-spec §5.11b says %d" % (len(hidden_states), len(expected)))
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


