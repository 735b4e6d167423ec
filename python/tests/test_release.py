"""The release-layout loader (tdiff_capture.release) against tdiff, without transformers: tdiff
writes the tiny and small presets in both layouts; the release copy exported to the HF layout
(export_hf) has the HF copy's config, tensor names and shapes, its BF16/F32 tensors equal to
the HF copy's (rounded to bf16 where the release stores BF16) and its FP8/FP4 tensors within
the formats' rounding; tdiff's reference on both folders is bit-identical; the torch path
(TorchOps, and load_into as build_model fills a model) equals the numpy path bit for bit; and
build_model's dtype rule. Needs numpy and h5py, the tdiff binary ($TDIFF or build/tdiff) for
the end-to-end part and torch for its part; each skipped, with the reason, otherwise. The code
tables, the dequantisers, the names and the config alone: test_release_codes.py."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
TDIFF = os.environ.get("TDIFF") or os.path.join(HERE, "..", "..", "build", "tdiff")

try:
    import h5py
    import numpy as np
    SKIP = None
except ImportError as e:
    SKIP = "needs numpy and h5py (%s)" % e
try:
    import torch
    NO_TORCH = None
except ImportError as e:
    torch = None
    NO_TORCH = "needs torch (%s)" % e
NO_TDIFF = None if os.access(TDIFF, os.X_OK) else "needs the tdiff binary: set TDIFF or build build/tdiff (%s not found)" % TDIFF
PRESETS = ("tiny", "small")


def scales(rel, p):
    """The scale multiplying each element of a quantised HF tensor: the dequantisers on codes of 1.0."""
    from tdiff_capture import release
    ops = release.NumpyOps()
    if p.kind == "fp8":
        _, codes = rel.array(p.tensor)
        return release.dequantize_fp8(np.full(codes.shape, 0x38, np.uint8),
                                      np.array(rel.array(release.scale_name(p.tensor))[1]), ops)
    E, R, K = p.shape
    out = []
    for e in range(E):
        for part in p.parts:
            w = p.experts[e][part]
            _, codes = rel.array(w)
            out.append(release.dequantize_fp4(np.full(codes.shape, 0x22, np.uint8),
                                              np.array(rel.array(release.scale_name(w))[1]), K, ops))
    return np.concatenate(out).reshape(E, R, K)


def stage_datasets(path):
    """The names of the datasets of a case file outside the model, meta and config groups."""
    names = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return [n for n in names if not n.startswith(("model", "meta", "config"))]


def run_quietly(*cmd, stderr=None):
    subprocess.run([str(c) for c in cmd], check=True, stdout=subprocess.DEVNULL, stderr=stderr)


@unittest.skipIf(SKIP is not None or NO_TDIFF is not None, SKIP or NO_TDIFF or "")
class ReleaseEndToEndTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from tdiff_capture import release
        cls.tmp = tempfile.mkdtemp(prefix="tdiff-release.")
        cls.exported = {}
        for preset in PRESETS:
            for fmt in ("release", "hf"):
                run_quietly(TDIFF, "synth", "--preset", preset, "--format", fmt, "--seed", "1", "-o", cls.dir(preset, fmt))
            cls.exported[preset] = release.export_hf(cls.dir(preset, "release"), cls.dir(preset, "export"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def dir(cls, preset, what):
        return os.path.join(cls.tmp, "%s-%s" % (preset, what))

    def test_export_has_the_hf_copys_config(self):
        for preset in PRESETS:
            with self.subTest(preset=preset):
                with open(os.path.join(self.dir(preset, "hf"), "config.json")) as f:
                    want = json.load(f)
                with open(os.path.join(self.dir(preset, "export"), "config.json")) as f:
                    got = json.load(f)
                differing = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
                self.assertEqual(differing, [], "config keys that differ from synth --format hf's")

    def test_export_has_the_hf_copys_tensors_within_the_formats_rounding(self):
        # BF16/F32 tensors equal the HF copy's (BF16 ones rounded to bf16); FP8 (3 mantissa bits)
        # within half a step, 2^-4 relative, or half the subnormal step 2^-9 s; E2M1 within half
        # the widest gap (2, between 4 and 6) times the scale.
        from tdiff_capture import release
        for preset in PRESETS:
            ours = self.exported[preset]
            hf = release.Safetensors(os.path.join(self.dir(preset, "hf"), "model.safetensors"))
            self.assertEqual(set(hf.header), set(ours), preset)
            rel = release.ReleaseFolder(self.dir(preset, "release"))
            params = rel.params()
            counts = {"plain": 0, "fp8": 0, "experts": 0}
            for name, got in ours.items():
                with self.subTest(preset=preset, tensor=name):
                    _, want = hf.array(name)
                    self.assertEqual(tuple(got.shape), tuple(want.shape))
                    p = params[name]
                    counts[p.kind] += 1
                    if p.kind == "plain":
                        ref = release.bf16_to_f32(release.f32_to_bf16_bits(want)) if p.dtype == "BF16" else want
                        self.assertTrue(np.array_equal(got, ref))
                        continue
                    w = np.asarray(want, dtype=np.float64)
                    s = scales(rel, p).astype(np.float64)
                    bound = np.maximum(np.abs(w) * 2.0 ** -4, s * 2.0 ** -10) if p.kind == "fp8" else s
                    err = np.abs(got.astype(np.float64) - w)
                    self.assertTrue(np.all(err <= bound), float(err.max()))
            self.assertTrue(all(counts.values()), (preset, counts))  # every kind of tensor was compared

    def test_reference_on_the_release_folder_equals_the_one_on_the_export(self):
        # tdiff's reference on both folders, same prompts: every stage and the logits, bit for bit.
        for preset in PRESETS:
            cases = {}
            for src in ("release", "export"):
                cases[src] = self.dir(preset, src) + ".h5"
                run_quietly(TDIFF, "case", "new", "--model", self.dir(preset, src), "--random-prompts", "2", "--len",
                            "40", "--seed", "1", "-o", cases[src])
                run_quietly(TDIFF, "golden", cases[src], stderr=subprocess.DEVNULL)
            stages = stage_datasets(cases["release"])
            self.assertTrue(any("logits" in n for n in stages), (preset, stages[:10]))
            with h5py.File(cases["release"], "r") as fa, h5py.File(cases["export"], "r") as fb:
                for n in stages:
                    with self.subTest(preset=preset, dataset=n):
                        x, y = np.asarray(fa[n]), np.asarray(fb[n])
                        self.assertEqual(x.shape, y.shape)
                        self.assertTrue(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))

    @unittest.skipIf(NO_TORCH is not None, NO_TORCH or "")
    def test_torch_path_equals_the_numpy_path(self):
        # The torch ops (on the CPU) against the numpy path, bit for bit, on every FP8/FP4 tensor
        # of the tiny release folder, experts 3 at a time; each value exact in bf16.
        from tdiff_capture import release
        rel = release.ReleaseFolder(self.dir("tiny", "release"))
        ops, to = release.TorchOps("cpu"), torch.from_numpy
        n = 0
        for hf, p in rel.params().items():
            if p.kind == "experts":
                got = torch.cat([rel.experts_value(p, e0, min(e0 + 3, p.shape[0]), ops, to)
                                 for e0 in range(0, p.shape[0], 3)])
            elif p.kind == "fp8":
                got = rel.fp8_value(p, ops, to)
            else:
                continue
            want = rel.value_f32(p)
            self.assertTrue(np.array_equal(got.numpy(), want), hf)
            self.assertTrue(np.array_equal(got.to(torch.bfloat16).float().numpy(), want), hf + ": not exact in bf16")
            n += 1
        self.assertGreater(n, 0)

    @unittest.skipIf(NO_TORCH is not None, NO_TORCH or "")
    def test_load_into_fills_a_bf16_state_dict(self):
        # load_into as build_model calls it (a model's state_dict: bf16, tid2eid int64), 3 experts a
        # chunk: the numpy values rounded to bf16 (exact for FP8/FP4); a release tensor with no
        # place refused, a model tensor the release lacks named.
        from tdiff_capture import release
        rel = release.ReleaseFolder(self.dir("tiny", "release"))
        want = {hf: rel.value_f32(p) for hf, p in rel.params().items()}
        state = {hf: torch.empty(v.shape, dtype=torch.int64 if v.dtype == np.int64 else torch.bfloat16)
                 for hf, v in want.items()}
        stats = release.load_into(rel, state, "cpu", chunk_elements=3 * 64 * 64)
        self.assertEqual(stats["tensors"], len(want))
        for hf, v in want.items():
            got = state[hf].numpy() if v.dtype == np.int64 else state[hf].float().numpy()
            ref = v if v.dtype == np.int64 else release.bf16_to_f32(release.f32_to_bf16_bits(v))
            self.assertTrue(np.array_equal(got, ref), hf)
        on_disk = sum(os.path.getsize(os.path.join(rel.dir, f)) for f in set(rel.weight_map.values()))
        self.assertTrue(0 < stats["stored_bytes"] <= on_disk, (stats["stored_bytes"], on_disk))
        self.assertEqual(stats["not_in_release"], [])
        state["model.extra.weight"] = torch.zeros(2)
        self.assertEqual(release.load_into(rel, state, "cpu")["not_in_release"], ["model.extra.weight"])
        state.pop("model.extra.weight")
        state.pop(next(iter(state)))
        with self.assertRaises(ValueError):  # a model lacking a release tensor
            release.load_into(rel, state, "cpu")


@unittest.skipIf(SKIP is not None, SKIP or "")
class ReleaseDtypesTest(unittest.TestCase):
    @unittest.skipIf(NO_TORCH is not None, NO_TORCH or "")
    def test_dtypes_as_from_pretrained_leaves_them(self):
        # build_model's dtype rule on a stand-in module: every floating parameter in the model
        # dtype, buffers as built except those the class keeps in float32 (whole dotted
        # components of the name, as transformers matches them).
        from tdiff_capture import release

        class Gate(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.randn(4, 3, dtype=torch.bfloat16))
                self.register_buffer("e_score_correction_bias", torch.randn(4, dtype=torch.bfloat16))
                self.register_buffer("e_score_correction_bias_2", torch.randn(4, dtype=torch.bfloat16))
                self.register_buffer("tid2eid", torch.arange(4))

        class Model(torch.nn.Module):
            _keep_in_fp32_modules_strict = ["e_score_correction_bias"]
            _keep_in_fp32_modules = ["norm"]

            def __init__(self):
                super().__init__()
                self.gate = Gate()
                self.norm = torch.nn.Linear(3, 3).to(torch.float64)
                self.register_buffer("inv_freq", torch.rand(2))

        for dtype, cast in ((torch.bfloat16, ["norm.weight", "norm.bias"]),
                            (torch.float16, ["gate.weight", "norm.weight", "norm.bias"])):
            m = Model()
            bias = m.gate.e_score_correction_bias.clone()
            self.assertEqual(release.cast_parameters(m, dtype), cast)
            kept = release.keep_buffers_in_float32(m, dtype)
            self.assertEqual(kept, ["gate.e_score_correction_bias"])
            self.assertEqual(m.gate.weight.dtype, dtype)
            self.assertEqual(m.norm.weight.dtype, dtype)  # parameters: always the model dtype
            self.assertEqual(m.gate.e_score_correction_bias.dtype, torch.float32)
            self.assertTrue(torch.equal(m.gate.e_score_correction_bias, bias.float()))  # widened exactly
            self.assertEqual(m.gate.e_score_correction_bias_2.dtype, torch.bfloat16)
            self.assertEqual(m.inv_freq.dtype, torch.float32)
            self.assertEqual(m.gate.tid2eid.dtype, torch.int64)
            self.assertIn("gate.e_score_correction_bias", m.state_dict())  # load_into fills it there


if __name__ == "__main__":
    unittest.main()
