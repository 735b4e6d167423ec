"""The module -> stage table covers every stage tensor of tdiff's graph (no torch needed)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tdiff_capture import mapping  # noqa: E402

ALL_TYPES = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]


class MappingTest(unittest.TestCase):
    def test_every_stage_tensor_has_a_row(self):
        self.assertEqual(mapping.missing_from_mapping(ALL_TYPES), [])

    def test_rows_are_stage_tensors_or_listed_extras(self):
        graph = {(mapping.stage_class(s)[0], t) for s, ts in mapping.stage_graph(ALL_TYPES, None) for t in ts}
        for key in mapping.MAP:
            self.assertTrue(key in graph or key in mapping.EXTRA_TENSORS, key)

    def test_isolation_notes_name_real_rows(self):
        for key in mapping.ISOLATION:
            self.assertIn(key, mapping.MAP)

    def test_hf_taps_are_rows_of_the_table(self):
        for tap in mapping.HF_TAPS:
            self.assertIn((tap.stage, tap.tensor), mapping.MAP)
            self.assertIn(tap.transform, mapping.TRANSFORMS)
            mapping.parse_where(tap.where)

    def test_parse_where(self):
        self.assertEqual(mapping.parse_where("output"), ("output", None))
        self.assertEqual(mapping.parse_where("output[2]"), ("output", 2))
        self.assertEqual(mapping.parse_where("input[1]"), ("input", 1))
        self.assertEqual(mapping.parse_where("kwarg:attention_mask"), ("kwarg", "attention_mask"))
        with self.assertRaises(ValueError):
            mapping.parse_where("inside")


if __name__ == "__main__":
    unittest.main()
