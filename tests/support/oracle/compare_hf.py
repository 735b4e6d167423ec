#!/usr/bin/env python3
"""refcpu against transformers at any size: the worst per-token relative L2 of every stage
class, as tests/e2e/oracle_test.cpp computes it for the shipped fixtures, from two files.

    tests/support/oracle/compare_hf.py CASE.h5 HF.h5 [--bound 1e-6] [--score-bound 1e-4]

CASE.h5 holds the reference (`tdiff golden CASE.h5 --tie-rule torch-cpu`, every stage), HF.h5
python/capture_hf.py's dump of the same case. Every dataset of HF.h5 that the reference has too
(`/<stage>/<tensor>` against `/reference/<stage>/<tensor>`) is compared; HF's extra tensors
(idx_sorted, wt_sorted) are skipped, and tensors on one side only are listed.

Per token: a tensor [B,S,...] or [B*S,...] is cut into rows of one token (compressed entries
[B,n,...]: one row per entry), and a row's error is |ref - hf| / |hf| (L2 over the row).
Integer tensors (expert ids, indexer picks) and masks must be equal; -inf (non-causal indexer
scores) must sit at the same places. Printed: one line per stage class (Lxx.attn.core/o: the
worst over layers) with the worst value and the layer and token where it is.

Acceptance (issue 23, model-spec §3.10): every class <= --bound (1e-6), except Lxx.attn.idx.score/score
and Lxx.attn.idx.weights/w <= --score-bound (1e-4): transformers computes the indexer's head
weights and scores in float32 (spec F6) and sums heads of both signs, so cancellation magnifies
float32 rounding (tiny: 1.9e-5; the head weights of the tiny release-format model 1.2e-6); the
selections made from them are compared exactly (Lxx.attn.idx.topk/sel). Cases with padding are refused:
transformers pools pad tokens where refcpu does not (model-spec §5.12); use tests/e2e/oracle_test.cpp.
Exit status: 0 within bounds; 1 a class beyond its bound, a mismatch, or nothing compared;
2 bad input. Needs numpy and h5py.
"""
import argparse
import re
import sys

import h5py
import numpy as np


def datasets(group):
    out = {}
    group.visititems(lambda name, obj: out.__setitem__(name, obj) if isinstance(obj, h5py.Dataset) else None)
    return out


def main():
    p = argparse.ArgumentParser(description="refcpu against transformers: worst per-token relative L2 "
                                            "per stage class (see the header)")
    p.add_argument("case", help="case file with /reference (tdiff golden --tie-rule torch-cpu)")
    p.add_argument("hf", help="python/capture_hf.py's dump of the same case")
    p.add_argument("--group-a", default="/reference", help="group of CASE (default /reference)")
    p.add_argument("--group-b", default="/", help="group of HF (default /)")
    p.add_argument("--bound", type=float, default=1e-6)
    p.add_argument("--score-bound", type=float, default=1e-4,
                   help="bound of Lxx.attn.idx.score/score and Lxx.attn.idx.weights/w (float32 in transformers)")
    p.add_argument("--positions", type=int, default=0,
                   help="compare only tokens at positions below N (and the compressed entries they complete): "
                        "transformers' float32 RoPE tables drift with position (model-spec §3.10), so a bound holds "
                        "only up to some position; 0: every token")
    p.add_argument("--classes", default="",
                   help="judge only stage classes matching this regular expression (e.g. the layer outputs and "
                        "logits, model-spec §3.10's acceptance); the others are printed, not judged")
    a = p.parse_args()

    try:
        fa, fb = h5py.File(a.case, "r"), h5py.File(a.hf, "r")
    except OSError as e:
        print("compare_hf: %s" % e, file=sys.stderr)
        return 2
    if a.group_a not in fa or a.group_b not in fb:
        print("compare_hf: no group %s in %s or %s in %s" % (a.group_a, a.case, a.group_b, a.hf), file=sys.stderr)
        return 2
    if "inputs/mask" in fa and not np.asarray(fa["inputs/mask"][()]).astype(bool).all():
        print("compare_hf: %s has padding; use tests/e2e/oracle_test.cpp (it leaves pad tokens out)" % a.case,
              file=sys.stderr)
        return 2
    ref, hf = datasets(fa[a.group_a]), datasets(fb[a.group_b])
    seq = int(fa["inputs/ids"].shape[1]) if "inputs/ids" in fa else 0

    def first_positions(x):
        """x restricted to tokens below --positions along dim 1 (or to the compressed entries
        those tokens complete, when dim 1 counts entries: seq / rate of them)."""
        if a.positions <= 0 or seq == 0 or x.ndim == 0:
            return x
        if x.ndim <= 2:  # [N, ...] with the batch folded into the tokens (one prompt: N = seq)
            return x[:a.positions] if x.shape[0] == seq else x
        if x.shape[1] == 0:
            return x
        keep = a.positions if x.shape[1] == seq else a.positions // max(seq // x.shape[1], 1)
        return x[:, :keep]
    only_ref = sorted(set(ref) - set(hf))
    only_hf = sorted(k for k in set(hf) - set(ref) if not k.endswith(("/idx_sorted", "/wt_sorted")))

    worst = {}  # class -> (value, where)
    bad = []
    for key in sorted(set(ref) & set(hf)):
        r, h = first_positions(ref[key][()]), first_positions(hf[key][()])
        stage, tensor = key.rsplit("/", 1)
        m = re.match(r"^L(\d+)\.(.*)$", stage)
        cls = ("Lxx." + m.group(2) if m else stage) + "/" + tensor
        where = "L%s" % m.group(1) if m else ""
        if r.shape != h.shape:
            bad.append("%s: shape %s (reference) vs %s (transformers)" % (key, list(r.shape), list(h.shape)))
            continue
        if r.dtype.kind != "f" or h.dtype.kind != "f":
            n = int(np.count_nonzero(r.astype(np.int64) != h.astype(np.int64)))
            if n:
                bad.append("%s: %d of %d values differ" % (key, n, r.size))
            value, token = 0.0, -1
        else:
            r64, h64 = r.astype(np.float64, copy=False), h.astype(np.float64, copy=False)
            inf_r, inf_h = np.isinf(r64), np.isinf(h64)
            if (inf_r != inf_h).any() or (r64[inf_r] != h64[inf_h]).any():
                bad.append("%s: infinities at different places (%d vs %d)" % (key, inf_r.sum(), inf_h.sum()))
            if np.isnan(r64).any() or np.isnan(h64).any():
                bad.append("%s: NaN" % key)
            with np.errstate(invalid="ignore"):  # -inf - -inf
                d = np.where(inf_r | inf_h, 0.0, r64 - h64)
            h0 = np.where(inf_h, 0.0, h64)
            rows = r.shape[0] * r.shape[1] if r.ndim >= 3 else (r.shape[0] if r.ndim == 2 else 1)
            num = np.sqrt((d.reshape(rows, -1) ** 2).sum(axis=1))
            den = np.sqrt((h0.reshape(rows, -1) ** 2).sum(axis=1))
            rel = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, np.inf, 0.0))
            token = int(np.argmax(rel)) if rel.size else -1
            value = float(rel[token]) if rel.size else 0.0
        if cls not in worst or value > worst[cls][0]:
            worst[cls] = (value, ("%s row %d" % (where, token)).strip() if token >= 0 else where)

    print("%-34s %10s %8s  %s" % ("stage/tensor", "rel L2", "bound", "worst at (layer, token row)"))
    over = []
    for cls, (value, where) in sorted(worst.items()):
        bound = a.score_bound if cls.endswith(("idx.score/score", "idx.weights/w")) else a.bound
        judged = not a.classes or re.search(a.classes, cls)
        flag = "" if value <= bound else "  OVER" if judged else "  (over, not judged)"
        if flag == "  OVER":
            over.append(cls)
        print("%-34s %10.1e %8.0e  %s%s" % (cls, value, bound, where, flag))
    for line in bad:
        print("MISMATCH %s" % line)
    if only_ref:
        print("in the reference only (%d): %s" % (len(only_ref), ", ".join(only_ref[:12]) + (" ..." if len(only_ref) > 12 else "")))
    if only_hf:
        print("in transformers' dump only (%d): %s" % (len(only_hf), ", ".join(only_hf[:12]) + (" ..." if len(only_hf) > 12 else "")))
    n = len(set(ref) & set(hf))
    ok = n > 0 and not over and not bad
    print("%s: %d tensors in %d stage classes compared%s; %d over their bound, %d mismatches"
          % ("PASS" if ok else "FAIL", n, len(worst),
             " (tokens at positions below %d)" % a.positions if a.positions > 0 else "", len(over), len(bad)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
