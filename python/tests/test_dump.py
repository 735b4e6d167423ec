"""The case reader's padding rule (model-spec §5.12): transformers is the model only for right
padding, so a left-padded case is refused unless captured as a candidate; and the list of cases
`tdiff ci SET --prepare` writes for --cases-from. Needs numpy, h5py."""
import contextlib
import io
import os
import sys
import json
import tempfile
import types
import unittest
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tdiff_capture import capture  # noqa: E402
from tdiff_capture.capture import read_case_list  # noqa: E402
from tdiff_capture.dump import InputError, check_right_padding  # noqa: E402


class PaddingTest(unittest.TestCase):
    right = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=np.uint8)
    left = np.array([[1, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1]], dtype=np.uint8)

    def test_right_padding_passes_silently(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            check_right_padding(self.right, "c.h5")
            check_right_padding(self.right, "c.h5", allow_left=True)
        self.assertEqual(err.getvalue(), "")

    def test_left_padding_is_refused_naming_the_row(self):
        with self.assertRaises(InputError) as e:
            check_right_padding(self.left, "c.h5")
        self.assertIn("c.h5: row 1 is left-padded (its first real token is at index 2)", str(e.exception))
        self.assertIn("--allow-left-padding", str(e.exception))

    def test_left_padding_allowed_for_a_candidate_is_said(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            check_right_padding(self.left, "c.h5", allow_left=True)
        self.assertIn("c.h5: 2 left-padded rows (row 1 from index 2)", err.getvalue())

    def test_holes_in_a_row_are_refused_even_when_left_padding_is_allowed(self):
        holed = np.array([[1, 0, 1, 1]], dtype=np.uint8)
        for allow in (False, True):
            with self.assertRaises(InputError) as e:
                check_right_padding(holed, "c.h5", allow_left=allow)
            self.assertIn("row 0: the real tokens are not contiguous", str(e.exception))


class CaseListTest(unittest.TestCase):
    def write(self, text):
        fd, path = tempfile.mkstemp(suffix=".tsv")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.addCleanup(os.remove, path)
        return path

    def test_reads_what_prepare_writes(self):
        path = self.write("short-right\t/c/short-right.h5\t/c/model\n\nlong-left\t/c/long-left.h5\t/c/model\n")
        self.assertEqual(read_case_list(path), [("short-right", "/c/short-right.h5", "/c/model"),
                                                ("long-left", "/c/long-left.h5", "/c/model")])

    def test_bad_lists_name_the_line(self):
        for text, says in (("a\t/c/a.h5\n", ":1: not 'name<TAB>case file<TAB>model folder'"),
                           ("a\t/c/a.h5\t/m\na\t/c/b.h5\t/m\n", ":2: case name 'a' used twice"),
                           ("x/y\t/c/a.h5\t/m\n", ":1: case name 'x/y' is not a file name"),
                           ("\n", "no case listed")):
            with self.assertRaises(InputError) as e:
                read_case_list(self.write(text))
            self.assertIn(says, str(e.exception))
        with self.assertRaises(InputError) as e:
            read_case_list("/nonexistent/list.tsv")
        self.assertIn("--cases-from /nonexistent/list.tsv", str(e.exception))


class CaseListModelsTest(unittest.TestCase):
    """A set's cases may run on several models (cases/README.md, "Models"): each model folder the
    list names is loaded once, and each case is captured with its own."""

    def test_each_model_loads_once_for_its_own_cases(self):
        root = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(root))
        for m in ("model", "model-trained"):
            os.makedirs(os.path.join(root, m))
            with open(os.path.join(root, m, "config.json"), "w") as f:
                json.dump({"vocab_size": 256}, f)
        listing = os.path.join(root, "list.tsv")
        with open(listing, "w") as f:
            for name, model in (("a", "model"), ("t", "model-trained"), ("b", "model")):
                f.write("%s\t%s/%s.h5\t%s/%s\n" % (name, root, name, root, model))
        ids = np.zeros((1, 4), dtype=np.int64)
        loads, captured = [], []
        args = types.SimpleNamespace(cases_from=listing, output=os.path.join(root, "dumps"), model=None, dtype="float32",
                                     hidden_states_check=False, allow_left_padding=False)
        with mock.patch.object(capture, "read_checked_case", lambda case, allow: (ids, None, None, {})), \
                mock.patch.object(capture, "load", lambda a, m: loads.append(m) or {"model_dir": m}), \
                mock.patch.object(capture, "capture_case",
                                  lambda a, loaded, case, out, *rest: captured.append((loaded["model_dir"], case, out)) or True):
            self.assertEqual(capture.run(args), 0)
        self.assertEqual(loads, [root + "/model", root + "/model-trained"])
        self.assertEqual(sorted(captured), sorted([(root + "/model", root + "/a.h5", args.output + "/a.h5"),
                                                   (root + "/model", root + "/b.h5", args.output + "/b.h5"),
                                                   (root + "/model-trained", root + "/t.h5", args.output + "/t.h5")]))
        ids[0, 0] = 300  # outside a model's vocabulary: refused before any model loads
        loads.clear()
        with mock.patch.object(capture, "read_checked_case", lambda case, allow: (ids, None, None, {})), \
                mock.patch.object(capture, "load", lambda a, m: loads.append(m) or {"model_dir": m}):
            with self.assertRaises(InputError) as e:
                capture.run(args)
        self.assertIn("token ids outside 0..255", str(e.exception))
        self.assertEqual(loads, [])


if __name__ == "__main__":
    unittest.main()


@unittest.skipIf(not os.environ.get("TDIFF"), "needs the tdiff binary (TDIFF, set by ctest)")
class BoundariesReferenceTest(unittest.TestCase):
    """A boundaries reference (tdiff golden --store boundaries) lacks the layers' inner stages,
    which tdiff recomputes and h5py cannot: isolate and substitution refuse it, replay (the
    stored selections) reads it."""

    def test_isolate_refuses_a_boundaries_reference_and_replay_reads_it(self):
        import subprocess
        from tdiff_capture.dump import read_reference
        tdiff = os.environ["TDIFF"]
        with tempfile.TemporaryDirectory() as d:
            case = os.path.join(d, "c.h5")
            for args in (["synth", "--preset", "tiny", "--seed", "1", "-o", os.path.join(d, "m")],
                         ["case", "new", "--model", os.path.join(d, "m"), "--random-prompts", "1", "--len", "8",
                          "--seed", "1", "-o", case],
                         ["golden", case, "--store", "boundaries"]):
                subprocess.run([tdiff] + args, check=True, capture_output=True)
            read_reference(case, every_stage=False).close()
            with self.assertRaises(InputError) as e:
                read_reference(case)
            self.assertIn("stores the layer boundaries only (tdiff golden --store boundaries)", str(e.exception))
            self.assertIn("store every stage with `tdiff golden %s`" % case, str(e.exception))
