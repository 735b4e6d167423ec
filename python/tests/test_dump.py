"""The case reader's padding rule (spec 5.12): transformers is the model only for right
padding, so a left-padded case is refused unless captured as a candidate. Needs numpy, h5py."""
import contextlib
import io
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

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


if __name__ == "__main__":
    unittest.main()
