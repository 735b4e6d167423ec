"""tdiff-capture's engine side without transformers: a request becomes one capture of its case
into its dump in its mode with its stages substituted, a bad request is one line and exit 2,
the inputs' hash is tdiff's (checked against a dump the C tap wrote), and tokenize writes the
token file `tdiff case new --tokens` reads."""
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from tdiff_capture import capture  # noqa: E402
from tdiff_capture.dump import inputs_sha256  # noqa: E402
from tdiff_capture.protocol import Request  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TDIFF = os.environ.get("TDIFF") or os.path.join(ROOT, "build", "tdiff")
TAP_EMU = os.environ.get("TAP_EMU") or os.path.join(ROOT, "build", "tap_emu")
try:
    import tokenizers
except ImportError:
    tokenizers = None


def capture_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tdiff_capture"] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."), **(env or {})))


class EngineRequestTest(unittest.TestCase):
    def test_a_request_is_one_capture_in_its_mode(self):
        root = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(root))
        os.makedirs(os.path.join(root, "m"))
        with open(os.path.join(root, "m", "config.json"), "w") as f:
            json.dump({"vocab_size": 256}, f)
        ids = np.zeros((1, 4), dtype=np.int64)
        request = Request(root + "/c.h5", root + "/d.h5", "replay", ["L00.attn_norm"], 3)
        seen = []
        args = types.SimpleNamespace(model=root + "/m", dtype="bfloat16", hidden_states_check=False,
                                     allow_left_padding=False)
        with mock.patch.object(capture, "read_checked_case", lambda case, allow: (ids, None, None, {})), \
                mock.patch.object(capture, "read_reference", lambda case, why, every_stage=True: types.SimpleNamespace(close=lambda: None)), \
                mock.patch.object(capture, "load", lambda a, m: {"model_dir": m}), \
                mock.patch.object(capture, "capture_case",
                                  lambda a, loaded, case, out, inputs, how, t: seen.append((case, out, how)) or True):
            self.assertEqual(capture.run(args, request=request), 0)
        (case, out, how), = seen
        self.assertEqual((case, out, how["mode"]), (root + "/c.h5", root + "/d.h5", "replay"))
        self.assertTrue(how["substitute"]("L00.attn_norm"))
        self.assertFalse(how["substitute"]("L01.attn_norm"))

    def test_a_bad_request_is_one_line_and_exit_2(self):
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d))
        bad = os.path.join(d, "r.json")
        for text, says in (('{"format": "tdiff-engine-request", "version": 1, "case": "/c.h5", "dump": "/d.h5", '
                            '"mode": "free"}', "mode 'free' is not run, replay or isolated"),
                           ("{", "not JSON")):
            with open(bad, "w") as f:
                f.write(text)
            p = capture_cli("engine", env={"TDIFF_REQUEST": bad})
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(says, p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        p = capture_cli("engine", "--request", os.path.join(d, "none.json"))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("none.json: cannot read the engine request", p.stderr)


@unittest.skipUnless(os.access(TDIFF, os.X_OK) and os.access(TAP_EMU, os.X_OK), "needs the tdiff and tap_emu binaries")
class InputsHashTest(unittest.TestCase):
    def test_the_hash_is_the_one_the_tap_records(self):
        import h5py
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d))
        model, case, dump = os.path.join(d, "m"), os.path.join(d, "c.h5"), os.path.join(d, "dump.h5")
        for cmd in ([TDIFF, "synth", "--preset", "tiny", "--seed", "1", "-o", model],
                    [TDIFF, "case", "new", "--model", model, "--random-prompts", "3", "--len", "9", "--pad-to", "12",
                     "--seed", "2", "-o", case],
                    [TAP_EMU, case, "fixed", "1", dump]):
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with h5py.File(case, "r") as c, h5py.File(dump, "r") as t:
            mask = c["inputs/mask"][()]
            self.assertFalse(mask.all(), "a padded case: the mask is part of the hash")
            recorded = t.attrs["case_inputs_sha256"]
            recorded = recorded.decode() if isinstance(recorded, bytes) else recorded
            self.assertEqual(inputs_sha256(c["inputs/ids"][()], mask != 0), recorded)


class TokenizeTest(unittest.TestCase):
    def test_without_a_tokenizer_file_is_exit_2(self):
        p = capture_cli("tokenize", "--tokenizer", "/nonexistent", "-", "-o", "/tmp/none.txt")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    @unittest.skipIf(tokenizers is None, "needs the tokenizers package")
    def test_writes_the_token_file_case_new_reads(self):
        from tokenizers import Tokenizer, models, pre_tokenizers, processors
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d))
        vocab = {"<bos>": 0, "<unk>": 1, "the": 2, "model": 3, "runs": 4}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 0)])
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "prompts.txt"), "w") as f:
            f.write("the model runs\n\nthe runs model twice\n")
        out = os.path.join(d, "tokens.txt")
        p = capture_cli("tokenize", "--tokenizer", d, os.path.join(d, "prompts.txt"), "-o", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "0 2 3 4\n0 2 4 3 1\n")
        p = capture_cli("tokenize", "--tokenizer", d, os.path.join(d, "prompts.txt"), "-o", out, "--no-special-tokens")
        with open(out) as f:
            self.assertEqual(f.read(), "2 3 4\n2 4 3 1\n")
        if os.access(TDIFF, os.X_OK):  # the file is what case new reads
            model, case = os.path.join(d, "m"), os.path.join(d, "c.h5")
            subprocess.run([TDIFF, "synth", "--preset", "tiny", "--seed", "1", "-o", model], check=True,
                           stdout=subprocess.DEVNULL)
            subprocess.run([TDIFF, "case", "new", "--model", model, "--tokens", out, "--seed", "1", "-o", case],
                           check=True, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    unittest.main()
