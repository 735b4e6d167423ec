"""transformers' DeepseekV4ForCausalLM through the package on the CPU: a float64 capture of the
tiny model equals the reference within 1e-6 (tests/support/oracle/compare_hf.py's per-token relative
L2; the indexer scores 1e-4), every stage is captured (the mapping covers what transformers
exposes), --rope-f64 makes the tables exact, isolate writes a dump that `tdiff run
--candidate-dump` ranks, and a release folder loads with every tensor in the dtype
from_pretrained gives the same model in the HF layout. Needs torch, transformers, numpy, h5py and the tdiff binary ($TDIFF,
else build/tdiff); skipped otherwise."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
TDIFF = os.environ.get("TDIFF") or os.path.join(ROOT, "build", "tdiff")

try:
    import h5py
    import numpy as np
    import torch
    import transformers  # noqa: F401
    SKIP = None
except ImportError as e:
    SKIP = "needs torch, transformers, numpy and h5py (%s)" % e
if SKIP is None and not os.access(TDIFF, os.X_OK):
    SKIP = "needs the tdiff binary: set TDIFF or build build/tdiff (%s not found)" % TDIFF


def _floats(ds):
    """A dump's floating dataset as float64 (bf16 bit patterns widened)."""
    if ds.attrs.get("dtype") == "bf16":
        return (ds[()].astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return ds[()].astype(np.float64)


def sh(*cmd, ok=(0,)):
    p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode not in ok:
        raise AssertionError("%s: exit %d\n%s" % (" ".join(map(str, cmd)), p.returncode, p.stdout[-6000:]))
    return p.stdout


@unittest.skipIf(SKIP is not None, SKIP or "")
class HfTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tdiff-pypkg-")
        cls.model = os.path.join(cls.dir, "tiny")
        cls.case = os.path.join(cls.dir, "tiny.h5")
        sh(TDIFF, "synth", "--preset", "tiny", "--seed", "1", "-o", cls.model)
        # one unpadded prompt of 96 tokens (as tests/support/oracle's tiny-long): every stage, the indexer selecting
        sh(TDIFF, "case", "new", "--model", cls.model, "--random-prompts", "1", "--len", "96", "--seed", "2",
           "-o", cls.case)
        sh(TDIFF, "golden", cls.case, "--tie-rule", "torch-cpu")

    @classmethod
    def tearDownClass(cls):
        out = os.environ.get("OUT")
        if out:   # keep the dumps for a look (the device's $OUT comes back)
            for name in os.listdir(cls.dir):
                if name.endswith(".h5") or name.endswith(".log"):
                    shutil.copy(os.path.join(cls.dir, name), out)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def capture(self, name, *extra, cmd="capture"):
        out = os.path.join(self.dir, name + ".h5")
        log = os.path.join(self.dir, name + ".log")
        p = subprocess.run([sys.executable, "-m", "tdiff_capture", cmd, "--model", self.model, "--case", self.case,
                            "-o", out] + list(extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..")))
        with open(log, "w") as f:
            f.write(p.stdout)
        self.assertEqual(p.returncode, 0, p.stdout[-6000:])
        return out, p.stdout

    def compare(self, dump, *extra):
        return sh(sys.executable, os.path.join(ROOT, "tests", "support", "oracle", "compare_hf.py"), self.case, dump,
                  "--bound", "1e-6", "--score-bound", "1e-4", *extra)

    def test_float64_capture_equals_the_reference(self):
        out, log = self.capture("f64", "--dtype", "float64", "--device", "cpu", "--store", "f64",
                                "--hidden-states-check")
        with h5py.File(out, "r") as f:
            self.assertEqual(json.loads(f.attrs["not_captured"]), {}, "a stage transformers exposes is not mapped")
            self.assertEqual(json.loads(f.attrs["shape_errors"]), [])
            self.assertEqual(f.attrs["tdiff_dump_mode"], "run")
            self.assertEqual(f.attrs["env.dtype"], "float64")
            self.assertIn("transformers", f.attrs["env.engine"])
        self.compare(out)
        # the dump is what `tdiff run --candidate-dump` reads
        sh(TDIFF, "run", self.case, "--model", self.model, "--candidate-dump", out, "--no-record", ok=(0, 1))

    def test_cases_from_captures_each_case_as_one_at_a_time(self):
        # Two names for the one case, in `tdiff ci --prepare`'s format: the model is loaded once
        # and each dump holds what a capture of that case alone holds, bit for bit.
        single, _ = self.capture("single", "--dtype", "float64", "--device", "cpu", "--store", "f64", cmd="isolate")
        listing = os.path.join(self.dir, "cases.tsv")
        with open(listing, "w") as f:
            for name in ("a", "b"):
                f.write("%s\t%s\t%s\n" % (name, self.case, self.model))
        folder = os.path.join(self.dir, "many")
        p = subprocess.run([sys.executable, "-m", "tdiff_capture", "isolate", "--cases-from", listing, "-o", folder,
                            "--dtype", "float64", "--device", "cpu", "--store", "f64"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..")))
        self.assertEqual(p.returncode, 0, p.stdout[-6000:])
        self.assertEqual(p.stdout.count("# timing: load"), 2, p.stdout[-3000:])
        self.assertEqual(p.stdout.count("# timing: load 0.00 s"), 1, "the model is loaded once: " + p.stdout[-3000:])
        with h5py.File(single, "r") as one:
            keys = []
            one.visititems(lambda k, v: keys.append(k) if isinstance(v, h5py.Dataset) else None)
            self.assertGreater(len(keys), 100)
            for name in ("a", "b"):
                with h5py.File(os.path.join(folder, name + ".h5"), "r") as f:
                    self.assertEqual(f.attrs["tdiff_dump_mode"], "isolated")
                    for k in keys:
                        self.assertTrue(np.array_equal(one[k][()], f[k][()]), "%s: %s" % (name, k))

    def test_legacy_command_line(self):
        out = os.path.join(self.dir, "legacy.h5")
        sh(sys.executable, os.path.join(ROOT, "python", "capture_hf.py"), "--model", self.model, "--case", self.case,
           "-o", out, "--stages", "L0*.attn.core,lm_head")
        with h5py.File(out, "r") as f:
            self.assertEqual(f["lm_head/logits"].dtype, np.float64)
            self.assertEqual(f.attrs["written_by"], "python/capture_hf.py")

    def test_rope_f64_tables_are_exact(self):
        plain, _ = self.capture("rope32", "--dtype", "float64", "--device", "cpu", "--stages", "rope.*")
        exact, log = self.capture("rope64", "--dtype", "float64", "--device", "cpu", "--stages", "rope.*",
                                  "--rope-f64")
        self.assertIn("rope-f64", log)
        # the compressors and indexers own rotary modules of their own: every one is patched
        self.assertRegex(log, r"rope-f64: ([3-9]|[1-9][0-9]+) rotary modules patched")
        with h5py.File(self.case, "r") as c, h5py.File(plain, "r") as a, h5py.File(exact, "r") as b:
            for key in ("rope.main/cos", "rope.main/sin", "rope.compress/cos", "rope.compress/sin"):
                ref = c["reference/" + key][()]
                err32 = np.abs(a[key][()] - ref).max()
                err64 = np.abs(b[key][()] - ref).max()
                self.assertLess(err64, 1e-13, key)
                self.assertLessEqual(err64, err32, key)

    def test_isolate(self):
        out, log = self.capture("iso", "--dtype", "float64", "--device", "cpu", "--store", "f64", cmd="isolate")
        self.assertIn("reference tensors fed", log)
        with h5py.File(out, "r") as f:
            self.assertEqual(f.attrs["tdiff_dump_mode"], "isolated")
            self.assertEqual(json.loads(f.attrs["not_captured"]), {})
            self.assertEqual(json.loads(f.attrs["not_fed"]), {})
        # each stage on the reference's inputs: local float64-vs-float32 steps only
        self.compare(out)
        text = sh(TDIFF, "run", self.case, "--model", self.model, "--candidate-dump", out, "--no-record", ok=(0, 1))
        self.assertIn("isolated stages (each on the reference's inputs), ranked by local error", text)

    def test_bf16_capture_on_the_cpu(self):
        out, log = self.capture("bf16", "--dtype", "bfloat16", "--device", "cpu", "--stages", "L00.*,lm_head")
        with h5py.File(out, "r") as f:
            self.assertEqual(f.attrs["env.dtype"], "bfloat16")
            self.assertEqual(f["L00.attn.q_a/out"].attrs["dtype"], "bf16")
        text = sh(TDIFF, "run", self.case, "--model", self.model, "--candidate-dump", out, "--no-record",
                  "--dump-policy", "fixed", ok=(0, 1))
        self.assertIn("dump lacks", text)

    def test_replay_changes_nothing_where_the_choices_agree(self):
        # float64 chooses as the reference does (tie rule torch-cpu): replay takes the reference's
        # choices, the routing weights recomputed from its own scores, and writes what capture writes.
        free, _ = self.capture("free64", "--dtype", "float64", "--device", "cpu", "--store", "f64")
        replay, log = self.capture("replay64", "--dtype", "float64", "--device", "cpu", "--store", "f64",
                                   "--selections", "replay")
        self.assertIn("replay: the reference's choices taken at", log)
        self.assertIn("differed in no row", log)
        self.assertIn("self-checks:", log)  # the recomputed weights equal the router's own, bit for bit
        self.assertNotIn("self-check not bitwise", log)
        with h5py.File(free, "r") as a, h5py.File(replay, "r") as b:
            self.assertEqual(b.attrs["tdiff_dump_mode"], "replay")
            self.assertEqual(a.attrs["case_inputs_sha256"], b.attrs["case_inputs_sha256"])
            flips = json.loads(b.attrs["replay_flips"])
            self.assertTrue(any(k.endswith("moe.select") for k in flips), flips)
            self.assertTrue(all(v["rows"] == 0 for v in flips.values()), flips)
            keys = []
            a.visititems(lambda k, v: keys.append(k) if isinstance(v, h5py.Dataset) else None)
            self.assertGreater(len(keys), 100)
            for k in keys:
                self.assertTrue(np.array_equal(a[k][()], b[k][()]), k)
        text = sh(TDIFF, "run", self.case, "--model", self.model, "--candidate-dump", replay, "--no-record",
                  "--dump-policy", "fp32", "--no-reports")
        self.assertNotIn("followed the dump's choices", text)

    def test_replay_in_bf16_takes_the_references_choices(self):
        # bf16 flips some choices: replay records the model's own, routes on the reference's, and
        # the weights it writes are its own scores at the reference's experts.
        out, log = self.capture("replay-bf16", "--dtype", "bfloat16", "--device", "cpu", "--selections", "replay")
        self.assertIn("replay: the reference's choices taken at", log)
        with h5py.File(out, "r") as f, h5py.File(self.case, "r") as c:
            flips = json.loads(f.attrs["replay_flips"])
            self.assertTrue(flips)
            for stage, v in flips.items():  # the rows counted are those whose own choice differs
                if stage.endswith("topk"):
                    own, ref = f[stage + "/sel"][()], c["reference/%s/sel" % stage][()]
                else:
                    own, ref = f[stage + "/idx_sorted"][()], np.sort(c["reference/%s/idx" % stage][()], axis=-1)
                self.assertEqual(v["rows"], int((own != ref).reshape(-1, own.shape[-1]).any(axis=-1).sum()), stage)
            for stage in (k[:-len(".select")] for k in flips if k.endswith("moe.select")):
                # By expert id on both sides: a row whose own choice is the reference's keeps the
                # router's own order, which near-equal scores can make another than the reference's.
                ids = np.sort(c["reference/%s.select/idx" % stage][()], axis=-1)
                g = torch.from_numpy(_floats(f[stage + ".router/score"])).gather(1, torch.from_numpy(ids))
                got = torch.from_numpy(_floats(f[stage + ".weights/wt_sorted"]))
                self.assertLess(float((got / got.sum(-1, keepdim=True) - g / g.sum(-1, keepdim=True)).abs().max()),
                                2e-2, stage)

    def engine_cmd(self, *extra):
        return " ".join([sys.executable, "-m", "tdiff_capture", "engine", "--model", self.model, "--dtype", "float64",
                         "--device", "cpu", "--store", "f64", "--rope-f64"] + list(extra))

    def test_engine_substitutes_the_requested_stages(self):
        # A fault in layer 1's output projection: substituted, its error stays out of the streams.
        fault = "--fault model.layers.1.self_attn.o_b_proj=float16"
        errors = {}
        for name, substitute in (("faulty", []), ("substituted", ["L01.attn.o_b"])):
            request = os.path.join(self.dir, "request-%s.json" % name)
            dump = os.path.join(self.dir, "engine-%s.h5" % name)
            with open(request, "w") as f:
                json.dump({"format": "tdiff-engine-request", "version": 1, "case": self.case, "dump": dump,
                           "mode": "run", "substitute": substitute, "seed": 1}, f)
            p = subprocess.run(self.engine_cmd(fault).split(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."),
                                                   TDIFF_REQUEST=request))
            self.assertEqual(p.returncode, 0, p.stdout[-4000:])
            with h5py.File(dump, "r") as d, h5py.File(self.case, "r") as c:
                self.assertIn("o_b_proj=float16", d.attrs["env.fault"])
                ref = c["reference/L01.hc_attn.post/X"][()]
                errors[name] = float(np.linalg.norm(d["L01.hc_attn.post/X"][()] - ref) / np.linalg.norm(ref))
                if substitute:
                    self.assertEqual(json.loads(d.attrs["fed"]), ["L01.attn.o_b/a"])
        # float64 transformers is within 1e-7 of the reference there (its float32 hyper-connection
        # steps); the fault alone puts 1e-4 on the streams
        self.assertGreater(errors["faulty"], 1e-5, errors)
        self.assertLess(errors["substituted"], 1e-6, errors)

    def test_bisect_names_a_planted_fault_in_transformers(self):
        # Layer 1's output projection in float16 inside float64 transformers, and the same fault
        # in tdiff's emu (matmul_accum = fp16 there): bisect's result names the same stage for
        # both. On this case the fault does not reach the logits past the fp32 floor (which flips
        # choices), so it is named as the largest local deviation from the floor, for both.
        results = {}
        fault = os.path.join(self.dir, "o_b-fp16.toml")
        with open(fault, "w") as f:
            f.write('preset = "fp32"\n[[override]]\nstages = "L01.attn.o_b"\nmatmul_accum = "fp16"\n')
        for name, candidate in (("hf", ["--candidate-cmd", self.engine_cmd(
                "--fault", "model.layers.1.self_attn.o_b_proj=float16"), "--policy", "fp32"]),
                                ("emu", ["--policy", fault])):
            p = subprocess.run([TDIFF, "bisect", self.case] + candidate + ["--floor", "fp32", "-o",
                                                                           os.path.join(self.dir, "bisect-" + name)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..")))
            with open(os.path.join(self.dir, "bisect-%s.log" % name), "w") as f:
                f.write(p.stdout)
            self.assertIn(p.returncode, (0, 1), p.stdout[-4000:])
            result = [line for line in p.stdout.splitlines() if line.startswith("result ")]
            self.assertEqual(len(result), 1, p.stdout[-4000:])
            results[name] = result[0]
        for name, line in results.items():
            self.assertRegex(line, r"(culprit|deviation from the floor is) L01\.attn\.o_b", "%s: %s" % (name, line))

    def release_model(self):
        """The tiny preset in DeepSeek's release layout (FP8 linears, FP4 experts, release
        names), with a case and its reference; built once."""
        model = os.path.join(self.dir, "tiny-release")
        case = os.path.join(self.dir, "tiny-release.h5")
        if not os.path.exists(case + ".done"):
            sh(TDIFF, "synth", "--preset", "tiny", "--format", "release", "--seed", "1", "-o", model)
            sh(TDIFF, "case", "new", "--model", model, "--random-prompts", "1", "--len", "96", "--seed", "2",
               "-o", case)
            sh(TDIFF, "golden", case, "--tie-rule", "torch-cpu")
            open(case + ".done", "w").close()
        return model, case

    def test_release_folder_builds_what_from_pretrained_builds(self):
        # In bf16, the release reader's model holds every parameter and buffer in the dtype
        # from_pretrained gives the HF-layout folder of the same preset: the rotary modules'
        # inv_freq stays float32 (cast to bf16 it moves the RoPE angles by up to a radian
        # at 2300 tokens: rope.main/cos rel_l2 0.14 instead of bf16's 1e-3 on real4), and so
        # does the routers' e_score_correction_bias (the device's first run of this test
        # found it bf16).
        from tdiff_capture import hf
        release_dir, _ = self.release_model()
        dtypes = {}
        for name, folder in (("hf", self.model), ("release", release_dir)):
            model, _ = hf.load_model(folder, dtype=torch.bfloat16, device="cpu")
            dtypes[name] = {n: str(t.dtype) for n, t in list(model.named_parameters()) + list(model.named_buffers())}
        differing = {n: (dtypes["release"].get(n), dtypes["hf"].get(n))
                     for n in set(dtypes["release"]) | set(dtypes["hf"]) if dtypes["release"].get(n) != dtypes["hf"].get(n)}
        self.assertEqual(differing, {}, "name: (release reader, from_pretrained)")
        # the routers' correction bias as transformers keeps it (float32 in DeepSeek's inference)
        bias = {n: d for n, d in dtypes["release"].items() if n.endswith("e_score_correction_bias")}
        self.assertTrue(bias)
        self.assertEqual(set(bias.values()), {"torch.float32"}, bias)
        inv_freq = {n: d for n, d in dtypes["release"].items() if n.endswith("inv_freq")}
        self.assertTrue(inv_freq)
        self.assertEqual(set(inv_freq.values()), {"torch.float32"}, inv_freq)

    def test_release_folder_capture_equals_the_reference(self):
        # The release-layout tiny loaded by tdiff_capture.release: its float64 capture equals
        # tdiff's reference of the same folder within 1e-6, as the HF-layout capture does.
        model, case = self.release_model()
        out = os.path.join(self.dir, "release-f64.h5")
        p = subprocess.run([sys.executable, "-m", "tdiff_capture", "capture", "--model", model, "--case", case,
                            "-o", out, "--dtype", "float64", "--device", "cpu", "--store", "f64"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..")))
        self.assertEqual(p.returncode, 0, p.stdout[-6000:])
        self.assertIn("release layout", p.stdout)
        with h5py.File(out, "r") as f:
            self.assertEqual(json.loads(f.attrs["not_captured"]), {})
        sh(sys.executable, os.path.join(ROOT, "tests", "support", "oracle", "compare_hf.py"), case, out,
           "--bound", "1e-6", "--score-bound", "1e-4")


if __name__ == "__main__":
    unittest.main()
