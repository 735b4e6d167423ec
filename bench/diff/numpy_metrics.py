#!/usr/bin/env python3
"""numpy computing the metrics that tdiff's tensor_metrics computes, on the same data as
bench_diff (same formulas), for a speed comparison. Idiomatic numpy: float64 per chunk,
vectorised reductions. Usage: numpy_metrics.py [--gib N] [--reps R]"""
import argparse
import time

import numpy as np

CHUNK = 1 << 20  # elements (8 MiB float64 temporaries): numpy's best of 2^16..2^22 here
REL_FLOOR = 1e-3


def make_data(n):
    r = np.empty(n, dtype=np.float32)
    c = np.empty(n, dtype=np.float32)
    for s in range(0, n, CHUNK):
        i = np.arange(s, min(n, s + CHUNK), dtype=np.uint64)
        a = ((i * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)).astype(np.float64) / 4294967296.0 - 0.5
        rf = a.astype(np.float32)
        g = ((i * np.uint64(40503)) & np.uint64(0xFFFF)).astype(np.float64) / 65536.0 - 0.5
        r[s:s + len(i)] = rf
        c[s:s + len(i)] = (rf.astype(np.float64) + 1e-3 * g).astype(np.float32)
    return r, c


def metrics(r, c):
    rr = cc = rc = dd = 0.0
    max_abs = max_abs_ref = max_rel = 0.0
    nan_r = nan_c = inf_r = inf_c = n_diff = 0
    for s in range(0, len(r), CHUNK):
        rs, cs = r[s:s + CHUNK], c[s:s + CHUNK]
        nan_r += np.count_nonzero(np.isnan(rs))
        nan_c += np.count_nonzero(np.isnan(cs))
        inf_r += np.count_nonzero(np.isinf(rs))
        inf_c += np.count_nonzero(np.isinf(cs))
        a = rs.astype(np.float64)
        b = cs.astype(np.float64)
        d = b - a
        rr += np.dot(a, a)
        cc += np.dot(b, b)
        rc += np.dot(a, b)
        dd += np.dot(d, d)
        ad = np.abs(d)
        ar = np.abs(a)
        max_abs = max(max_abs, ad.max())
        max_abs_ref = max(max_abs_ref, ar.max())
        max_rel = max(max_rel, (ad / np.maximum(ar, REL_FLOOR)).max())
        n_diff += np.count_nonzero(d)
    n = len(r)
    return dict(cosine=rc / np.sqrt(rr) / np.sqrt(cc), max_abs=max_abs, rmse=np.sqrt(dd / n),
                rel_l2=np.sqrt(dd) / np.sqrt(rr), max_rel=max_rel, n_diff=n_diff,
                nonfinite=nan_r + nan_c + inf_r + inf_c, max_abs_ref=max_abs_ref)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    n = int(args.gib * (1 << 30) / 4)
    r, c = make_data(n)
    best, m = 1e30, None
    for _ in range(args.reps):
        t0 = time.perf_counter()
        m = metrics(r, c)
        best = min(best, time.perf_counter() - t0)
    gbps = 2 * n * 4 / best / 1e9
    print(f"numpy {np.__version__}  {gbps:7.2f} GB/s  ({best:.3f} s)")
    print("values cosine={cosine:.17g} max_abs={max_abs:.17g} rmse={rmse:.17g} rel_l2={rel_l2:.17g} "
          "max_rel={max_rel:.17g}".format(**m))
    print(f"RESULT numpy_gbps={gbps:.3f} numpy_s={best:.4f}")


if __name__ == "__main__":
    main()
