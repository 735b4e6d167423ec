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


if __name__ == "__main__":
    unittest.main()
