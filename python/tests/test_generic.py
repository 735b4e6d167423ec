"""The generic recorder (a user's table of Taps) on a toy model: capture in bf16 with native
dtypes, and isolate feeding the reference's values. Needs torch, numpy, h5py."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

try:
    import torch
    import h5py
except ImportError as e:  # pragma: no cover
    torch = None
    REASON = "needs torch and h5py (%s)" % e


@unittest.skipIf(torch is None, "needs torch and h5py")
class GenericTest(unittest.TestCase):
    def model(self):
        class Layer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = torch.nn.LayerNorm(4)
                self.proj = torch.nn.Linear(4, 6)

            def forward(self, x):
                return self.proj(self.norm(x))

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = torch.nn.ModuleList([Layer(), Layer()])
                self.down = torch.nn.Linear(6, 4)

            def forward(self, x):
                for layer in self.layers:
                    x = self.down(layer(x))
                return x
        torch.manual_seed(0)
        return Model().to(torch.bfloat16)

    def test_capture_and_isolate(self):
        from tdiff_capture.dump import set_dump_attrs
        from tdiff_capture.generic import Recorder
        from tdiff_capture.mapping import Tap
        m = self.model()
        taps = [Tap("Lxx.attn_norm", "h", "layers.{l}.norm"),
                Tap("Lxx.attn.q_b", "out", "layers.{l}.proj", "output", "reshape")]
        shapes = {"L00.attn.q_b/out": (1, 3, 2, 3), "L01.attn.q_b/out": (1, 3, 2, 3)}
        x = torch.randn(1, 3, 4, dtype=torch.bfloat16)
        d = tempfile.mkdtemp()
        rec = Recorder(m, taps, 2, shapes=shapes)
        with torch.no_grad():
            m(x)
        rec.remove()
        with h5py.File(os.path.join(d, "run.h5"), "w") as f:
            keys = rec.write(f)
            set_dump_attrs(f, "run", {"engine": "toy"})
        self.assertEqual(keys, ["L00.attn.q_b/out", "L00.attn_norm/h", "L01.attn.q_b/out", "L01.attn_norm/h"])
        with h5py.File(os.path.join(d, "run.h5"), "r") as f:
            ds = f["L00.attn.q_b/out"]
            self.assertEqual(ds.shape, (1, 3, 2, 3))
            self.assertEqual(str(ds.dtype), "uint16")
            self.assertEqual(ds.attrs["dtype"], "bf16")
            self.assertEqual(f.attrs["tdiff_dump_mode"], "run")
            self.assertEqual(f.attrs["env.engine"], "toy")
        # isolate: a reference (here the capture + 1) is fed back at every tap
        with h5py.File(os.path.join(d, "ref.h5"), "w") as ref:
            g = ref.create_group("reference")
            for k, (v, _) in rec.values.items():
                g[k] = v.double().numpy() + 1.0
            iso = Recorder(m, taps, 2, reference=g)
            with torch.no_grad():
                m(x)
            iso.remove()
            self.assertEqual(len(iso.fed), 4)
            fed = torch.from_numpy(g["L00.attn.q_b/out"][()]).reshape(1, 3, 6).to(torch.bfloat16)
            with torch.no_grad():
                expected = m.layers[1].norm(m.down(fed))
            self.assertTrue(torch.equal(expected, iso.values["L01.attn_norm/h"][0]))


    def test_a_request_feeds_only_its_substituted_stages(self):
        import json
        from tdiff_capture.dump import InputError
        from tdiff_capture.generic import Recorder
        from tdiff_capture.mapping import Tap
        from tdiff_capture.protocol import read_request
        m = self.model()
        taps = [Tap("Lxx.attn_norm", "h", "layers.{l}.norm")]
        x = torch.randn(1, 3, 4, dtype=torch.bfloat16)
        d = tempfile.mkdtemp()
        request = os.path.join(d, "request.json")
        with open(request, "w") as f:
            json.dump({"format": "tdiff-engine-request", "version": 1, "case": "/c.h5", "dump": "/d.h5",
                       "substitute": ["L00.attn_norm"], "seed": 7}, f)
        os.environ["TDIFF_REQUEST"] = request
        try:
            r = read_request()
        finally:
            del os.environ["TDIFF_REQUEST"]
        self.assertEqual((r.case, r.dump, r.mode, r.seed), ("/c.h5", "/d.h5", "run", 7))
        with h5py.File(os.path.join(d, "ref.h5"), "w") as ref:
            g = ref.create_group("reference")
            for key in ("L00.attn_norm/h", "L01.attn_norm/h"):
                g[key] = torch.zeros(1, 3, 4).double().numpy()
            rec = Recorder(m, taps, 2, reference=g, feed=r.substituted)
            with torch.no_grad():
                out = m(x)
            rec.remove()
        self.assertEqual(rec.fed, {"L00.attn_norm/h"})
        with torch.no_grad():  # L00's norm output replaced by zeros: its projection's bias alone
            expected = m.down(m.layers[1](m.down(m.layers[0].proj(torch.zeros(1, 3, 4, dtype=torch.bfloat16)))))
        self.assertTrue(torch.equal(out, expected))
        with open(request, "w") as f:
            f.write('{"format": "tdiff-engine-request", "version": 1, "case": "/c.h5"}')
        with self.assertRaisesRegex(InputError, 'without "dump"'):
            read_request(request)


@unittest.skipIf(torch is None, "needs torch")
class RopeTest(unittest.TestCase):
    def test_yarn_frequencies_of_the_spec(self):
        from tdiff_capture.rope import inv_freq_f64

        class Cfg:
            rope_parameters = {"compress": {"rope_type": "yarn", "rope_theta": 160000, "factor": 16,
                                            "original_max_position_embeddings": 65536, "beta_fast": 32,
                                            "beta_slow": 1}}
        w = inv_freq_f64(Cfg, "compress", 64)   # model-spec §3.3's float32 values, to float32 precision
        for f, want in ((15, 3.6355385e-3), (16, 2.2656249e-3), (31, 5.6805294e-7)):
            self.assertAlmostEqual(float(w[f]) / want, 1.0, delta=1e-6)


if __name__ == "__main__":
    unittest.main()
