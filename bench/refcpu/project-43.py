#!/usr/bin/env python3
"""Project the time of `tdiff golden` on the whole 43-layer DeepSeek-V4-Flash from a run on
a few of its layers (tests/gpu/run-all real4: v4-flash-dims layers 0-3, sliding, sliding, CSA,
HCA, at 4096 tokens).

    bench/refcpu/project-43.py --log real4-golden.log --model MODEL_DIR [--target CONFIG.json]
                               [--tokens N]

Input: the log of `tests/gpu/measure PREFIX LIMIT tdiff golden CASE`: every record stamped with
the seconds since golden started; golden, on the terminal measure gives it, reports each stage
as it finishes ("golden [17/139] L00.attn.q_a"), and ends with "golden: 139 stages computed in
...". The measured model's layer types come from MODEL_DIR/config.json (layer_types, or the
release's compress_ratios; mlp_layer_types, or num_hash_layers, default 3), its stage list
from python/capture_hf.py's stage_graph (the order of src/model/stage_graph.cpp); the log must
name the same stages.

Method:
  - c(i) = the stamp of stage i's progress record: golden prints it after computing stage i and
    before storing it, so the interval between two records holds one stage's computation and
    the storing of the one before (each layer starts after the previous layer's last stage
    and stores its own last stage in the next interval: the same pattern for every layer).
    Stages without a record (a log of every tenth stage, where golden had no terminal) are
    interpolated linearly between their neighbours; the output says "interpolated".
  - A layer's seconds = c(its last stage) - c(the last stage before it): its weights' loading
    and conversion (done when a stage first needs them), its computation, its stores.
    Prologue = c(mask.window): starting, reading the case, embed, RoPE tables, mask.
    Epilogue = the end ("golden: ... computed" record) - c(the last layer's last stage):
    final.*, lm_head, storing them and committing the case file.
  - The projection: prologue + the sum over the target's 43 layers of the mean measured time
    of the layers of the same attention type and MoE routing (hash_moe or moe); where that
    pair was not measured (CSA with score routing: real4's CSA layer is hash-routed), the mean
    of the same attention type, said in the output (routing differs by the router's product,
    N x D x E = 4096 x 4096 x 256, about 9 GFLOP, under 1% of a layer) + the epilogue.
    Token count, batch and the stored stages are the measured run's (no scaling); tokens are
    only printed (--tokens). A layer type with no finished measured layer: no projection.
Prints the measured layers, the per-type means and one line "projection: ... = T s (M min)".
Exit status: 0 projected; 1 no projection (the log ends early, or a type is missing); 2 bad input.
Python 3 standard library only.
"""
import argparse
import importlib.machinery
import importlib.util
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SHORT = {"sliding_attention": "sliding", "compressed_sparse_attention": "csa",
         "heavily_compressed_attention": "hca"}


def fail(msg, code=2):
    print("project-43: %s" % msg, file=sys.stderr)
    sys.exit(code)


def schedule(cfg, src):
    """(layer types, mlp types) of a config.json, as src/model/config.cpp reads them."""
    n = cfg.get("num_hidden_layers")
    if not isinstance(n, int) or n <= 0:
        fail("%s: no num_hidden_layers" % src)
    if cfg.get("layer_types") is not None:
        lt = list(cfg["layer_types"])
    elif cfg.get("compress_ratios") is not None:
        by_ratio = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
        try:
            lt = [by_ratio[r] for r in cfg["compress_ratios"][:n]]
        except KeyError as e:
            fail("%s: compress_ratios holds %s (allowed: 0, 4, 128)" % (src, e))
    else:
        fail("%s: neither layer_types nor compress_ratios" % src)
    if cfg.get("mlp_layer_types") is not None:
        mt = list(cfg["mlp_layer_types"])
    else:
        h = cfg.get("num_hash_layers", 3)
        mt = ["hash_moe" if i < h else "moe" for i in range(n)]
    if len(lt) < n or len(mt) < n or any(t not in SHORT for t in lt[:n]):
        fail("%s: the layer schedule does not cover num_hidden_layers=%d" % (src, n))
    return lt[:n], mt[:n]


def load_source(name, path):
    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


class Stamps:
    """The completion stamps of golden's progress records: c[i] of stage i (1-based; c[0] = 0,
    golden's start) and `end`, the "golden: ... computed" record's (None when it is missing).
    at(i) interpolates a stage without a record between its neighbours and says so in
    `interpolated`; None past the last record."""

    def __init__(self, c, end):
        self.c, self.end = c, end
        self.last = max(c)
        self.known = sorted(c)
        self.interpolated = False

    def at(self, i):
        c = self.c
        if i in c:
            return c[i]
        if i > self.last:
            return None
        lo = max(k for k in self.known if k < i)
        hi = min(k for k in self.known if k > i)
        self.interpolated = True
        return c[lo] + (c[hi] - c[lo]) * (i - lo) / (hi - lo)


def read_stamps(path, names):
    """The Stamps of a stamped golden log whose records must name the stages `names` in order."""
    total = len(names)
    c = {0: 0.0}
    end = None
    rec = re.compile(r"^\s*([0-9.]+) golden \[(\d+)/(\d+)\] (\S+)\s*$")
    fin = re.compile(r"^\s*([0-9.]+) golden: (\d+) stages computed")
    with open(path, errors="replace") as f:
        for line in f:
            m = rec.match(line)
            if m:
                t, i, n, stage = float(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)
                if n != total or names[i - 1] != stage:
                    fail("%s: stage %d/%d is %s; the model's stage list (%d stages) has %s there"
                         % (path, i, n, stage, total, names[i - 1] if i <= total else "nothing"))
                c[i] = t
                continue
            m = fin.match(line)
            if m:
                end = float(m.group(1))
    if len(c) == 1:
        fail("%s: no progress record of tdiff golden" % path, 1)
    return Stamps(c, end)


def layer_spans(names):
    """{layer: (its first stage, its last stage)}, 1-based indices into `names`."""
    spans = {}
    for i, s in enumerate(names, 1):
        m = re.match(r"^L(\d+)\.", s)
        if m:
            l = int(m.group(1))
            lo, _ = spans.get(l, (i, i))
            spans[l] = (lo, i)
    return spans


def measure_layers(stamps, spans, m_lt, m_mt):
    """(prologue, one text per layer, {(attention, routing): [seconds]}, {attention: [seconds]},
    epilogue); prologue and epilogue None when not reached."""
    first_layer = min(lo for lo, _ in spans.values())
    prologue = stamps.at(first_layer - 1)
    rows, by_key, by_type = [], {}, {}
    for l in sorted(spans):
        lo, hi = spans[l]
        t0, t1 = stamps.at(lo - 1), stamps.at(hi)
        key = (SHORT[m_lt[l]], m_mt[l])
        if t0 is None or t1 is None:
            rows.append("L%02d %s/%s not finished" % (l, key[0], key[1]))
            continue
        rows.append("L%02d %s/%s %.1f s" % (l, key[0], key[1], t1 - t0))
        by_key.setdefault(key, []).append(t1 - t0)
        by_type.setdefault(key[0], []).append(t1 - t0)
    last_layer_end = stamps.at(max(hi for _, hi in spans.values()))
    end = stamps.end
    epilogue = end - last_layer_end if end is not None and last_layer_end is not None else None
    return prologue, rows, by_key, by_type, epilogue


def mean(xs):
    return sum(xs) / len(xs)


def project_layers(t_lt, t_mt, by_key, by_type):
    """The target's layers from the measured means: (seconds, one text per (attention, routing)
    pair, notes on pairs taken from the other routing, attention types with no measurement)."""
    counts, parts, notes, missing = {}, [], set(), set()
    secs = 0.0
    for lt, mt in zip(t_lt, t_mt):
        key = (SHORT[lt], mt)
        counts[key] = counts.get(key, 0) + 1
        if key in by_key:
            secs += mean(by_key[key])
        elif key[0] in by_type:
            secs += mean(by_type[key[0]])
            notes.add("%s/%s taken from %s layers of the other routing" % (key[0], key[1], key[0]))
        else:
            missing.add(key[0])
    for key, n in sorted(counts.items()):
        src = by_key.get(key) or by_type.get(key[0])
        parts.append("%d x %s/%s %s" % (n, key[0], key[1], "%.1f" % mean(src) if src else "?"))
    return secs, parts, notes, missing


def parse_args():
    p = argparse.ArgumentParser(description="Project `tdiff golden` on 43 layers from a few (see the header).")
    p.add_argument("--log", required=True, help="the stamped golden log (tests/gpu/measure PREFIX.log)")
    p.add_argument("--model", required=True, help="the measured model folder (its config.json)")
    p.add_argument("--target", help="config.json of the schedule to project to "
                                    "(default: V4-Flash's, from tests/gpu/flash-config)")
    p.add_argument("--tokens", type=int, default=0, help="the measured case's tokens, for the output only")
    return p.parse_args()


def main():
    a = parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        m_lt, m_mt = schedule(json.load(f), a.model + "/config.json")
    if a.target:
        with open(a.target) as f:
            t_lt, t_mt = schedule(json.load(f), a.target)
    else:
        flash = load_source("flash_config", os.path.join(ROOT, "tests", "gpu", "flash-config")).FLASH
        t_lt, t_mt = schedule(flash, "tests/gpu/flash-config")
    graph = load_source("capture_hf", os.path.join(ROOT, "python", "capture_hf.py")).stage_graph(m_lt, m_mt)
    names = [s for s, _ in graph]
    total = len(names)

    stamps = read_stamps(a.log, names)
    spans = layer_spans(names)
    prologue, rows, by_key, by_type, epilogue = measure_layers(stamps, spans, m_lt, m_mt)
    end, last = stamps.end, stamps.last
    tok = " at %d tokens" % a.tokens if a.tokens else ""
    print("measured (tdiff golden, %d layers%s%s): prologue %s | %s | epilogue %s | total %s"
          % (len(spans), tok, ", layer ends interpolated" if stamps.interpolated else "",
             "%.1f s" % prologue if prologue is not None else "?", " | ".join(rows),
             "%.1f s" % epilogue if epilogue is not None else "not reached",
             "%.1f s" % end if end is not None else "not finished (last record %.1f s, stage %d/%d %s)"
             % (stamps.c[last], last, total, names[last - 1])))
    print("per layer type: " + ", ".join("%s/%s %.1f s (%d)" % (k[0], k[1], mean(v), len(v))
                                         for k, v in sorted(by_key.items())))

    secs, parts, notes, missing = project_layers(t_lt, t_mt, by_key, by_type)
    if missing or epilogue is None or prologue is None:
        why = ("no finished layer of type %s" % ", ".join(sorted(missing))) if missing else "golden did not finish"
        print("projection: none (%s)" % why)
        return 1
    total_s = prologue + secs + epilogue
    print("projection: %d layers%s: %.1f + %s + %.1f = %.0f s (%.1f min)%s"
          % (len(t_lt), tok, prologue, " + ".join(parts), epilogue, total_s, total_s / 60,
             "; " + "; ".join(sorted(notes)) if notes else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
