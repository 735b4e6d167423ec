"""The release-layout loader (tdiff_capture.release) without transformers: the code tables,
FP8 and FP4 dequantisation against element loops, names and config against tdiff's own
reading, and end to end: tdiff writes the tiny and small presets in both layouts, the release
copy exported to the HF layout matches the HF copy, tdiff's reference on both folders is
bit-identical, and the torch path (load_into, as build_model fills a model) equals the numpy
path bit for bit. Needs numpy and h5py (torch for its part; the tdiff binary, $TDIFF or
build/tdiff, for the end-to-end part)."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
TDIFF = os.environ.get("TDIFF") or os.path.join(HERE, "..", "..", "build", "tdiff")

try:
    import h5py  # noqa: F401
    import numpy  # noqa: F401
    SKIP = None
except ImportError as e:
    SKIP = "needs numpy and h5py (%s)" % e


@unittest.skipIf(SKIP is not None, SKIP or "")
class ReleaseLoaderTest(unittest.TestCase):
    def setUp(self):
        self.lines = []

    def log(self, line):
        self.lines.append(line)

    def test_unit_checks(self):
        from tdiff_capture import release
        release.unit_checks(self.log)
        self.assertGreaterEqual(len(self.lines), 5, self.lines)

    @unittest.skipIf(not os.access(TDIFF, os.X_OK), "needs the tdiff binary ($TDIFF or build/tdiff)")
    def test_end_to_end_against_tdiff(self):
        from tdiff_capture import release
        release.end_to_end(TDIFF, self.log)
        text = "\n".join(self.lines)
        for what in ("tiny: tdiff golden on the release folder and on the export",
                     "small: tdiff golden on the release folder and on the export"):
            self.assertIn(what, text)
        try:
            import torch  # noqa: F401
        except ImportError:
            return
        self.assertIn("load_into (cpu)", text)  # the torch path ran

    def test_dtypes_as_from_pretrained_leaves_them(self):
        # build_model's dtype rule on a stand-in module: every floating parameter in the model
        # dtype, buffers as built except those the class keeps in float32 (whole dotted
        # components of the name, as transformers matches them).
        try:
            import torch
        except ImportError:
            self.skipTest("needs torch")
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
