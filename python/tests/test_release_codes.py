"""tdiff_capture.release without tdiff or torch: the code tables against their documented
values, FP8 and FP4 dequantisation against the element loops of tdiff's release_format.cpp
(float64), release -> HF names, and the HF config built from V4-Flash's release keys. Needs
numpy; skipped otherwise."""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

try:
    import numpy as np
    SKIP = None
except ImportError as e:
    SKIP = "needs numpy (%s)" % e


def fp8_loop(codes, scale):
    """dequantize_fp8 as release_format.cpp loops it (float64): the reference of the FP8 checks."""
    from tdiff_capture.release import E4M3
    O, K = codes.shape
    out = np.zeros((O, K))
    for r in range(O):
        for k in range(K):
            if scale.dtype == np.float32:
                s = float(scale[r // 128, k // 128])
            else:
                s = math.ldexp(1.0, int(scale[r // 128, k // 128]) - 127)
            out[r, k] = float(E4M3[codes[r, k]]) * s
    return out


def fp4_loop(packed, scale, K):
    """dequantize_fp4 as release_format.cpp loops it (float64): the reference of the FP4 checks."""
    O = packed.shape[0]
    out = np.zeros((O, K))
    mag = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    for r in range(O):
        for k in range(K):
            byte = int(packed[r, k // 2])
            code = byte & 15 if k % 2 == 0 else byte >> 4
            v = mag[code & 7] * (-1 if code & 8 else 1)
            out[r, k] = v * math.ldexp(1.0, int(scale[r, k // 32]) - 127)
    return out


@unittest.skipIf(SKIP is not None, SKIP or "")
class CodeTablesTest(unittest.TestCase):
    def test_tables_hold_the_documented_values(self):
        # E4M3: 448 the largest, subnormals down to 2^-9, NaN at S.1111.111; E2M1's eight
        # magnitudes and their negatives; E8M0: 2^-127 .. 2^127, NaN at 0xFF.
        from tdiff_capture.release import E2M1, E4M3, E8M0
        self.assertTrue(E4M3[0x7E] == 448 and E4M3[0xFE] == -448 and E4M3[0x38] == 1 and E4M3[0x01] == 2.0 ** -9)
        self.assertTrue(E4M3[0x08] == 2.0 ** -6 and E4M3[0x07] == 7 * 2.0 ** -9)
        self.assertTrue(np.isnan(E4M3[0x7F]) and np.isnan(E4M3[0xFF]))
        self.assertEqual(list(E2M1[:8]), [0, 0.5, 1, 1.5, 2, 3, 4, 6])
        self.assertTrue(all(E2M1[8 + i] == -E2M1[i] for i in range(8)))
        self.assertTrue(E8M0[127] == 1 and E8M0[128] == 2 and E8M0[0] == 2.0 ** -127 and np.isnan(E8M0[255]))


@unittest.skipIf(SKIP is not None, SKIP or "")
class DequantizeTest(unittest.TestCase):
    def setUp(self):
        from tdiff_capture import release
        self.release = release
        self.ops = release.NumpyOps()
        self.rng = np.random.default_rng(7)

    def test_fp8_equals_the_element_loop(self):
        # A multi-block grid with ragged edges, E8M0 and F32 scales.
        for O, K in ((300, 260), (128, 128), (5, 129)):
            codes = self.rng.integers(0, 256, size=(O, K), dtype=np.uint8)
            codes[(codes & 0x7F) == 0x7F] = 0x3C  # no NaN codes
            e = self.rng.integers(110, 140, size=(-(-O // 128), -(-K // 128)), dtype=np.uint8)
            for scale in (e, self.release.E8M0[e].astype(np.float32)):
                with self.subTest(O=O, K=K, scale=str(scale.dtype)):
                    got = self.release.dequantize_fp8(codes, scale, self.ops)
                    self.assertEqual(got.dtype, np.float32)
                    self.assertTrue(np.array_equal(got.astype(np.float64), fp8_loop(codes, scale)))

    def test_fp8_batched_is_one_by_one(self):
        # A leading expert axis gives what each matrix gives alone.
        codes = self.rng.integers(0, 0x7E, size=(3, 130, 140), dtype=np.uint8)
        e = self.rng.integers(120, 130, size=(3, 2, 2), dtype=np.uint8)
        deq = self.release.dequantize_fp8
        self.assertTrue(np.array_equal(deq(codes, e, self.ops),
                                       np.stack([deq(codes[i], e[i], self.ops) for i in range(3)])))

    def test_fp4_equals_the_element_loop(self):
        # Nibble order, per-32 groups, odd K.
        for O, K in ((7, 64), (3, 100), (4, 33)):
            packed = self.rng.integers(0, 256, size=(O, -(-K // 2)), dtype=np.uint8)
            scale = self.rng.integers(120, 135, size=(O, -(-K // 32)), dtype=np.uint8)
            with self.subTest(O=O, K=K):
                got = self.release.dequantize_fp4(packed, scale, K, self.ops)
                self.assertTrue(np.array_equal(got.astype(np.float64), fp4_loop(packed, scale, K)))

    def test_fp4_low_nibble_is_the_even_column(self):
        one = self.release.dequantize_fp4(np.array([[0x71]], dtype=np.uint8), np.array([[127]], dtype=np.uint8), 2,
                                          self.ops)
        self.assertEqual(one.tolist(), [[0.5, 6.0]])  # low nibble (1 -> 0.5) is column 0, high (7 -> 6) column 1

    def test_a_nan_code_is_refused(self):
        with self.assertRaises(ValueError):
            self.release.dequantize_fp8(np.array([[0x7F]], dtype=np.uint8), np.array([[127]], dtype=np.uint8),
                                        self.ops)


@unittest.skipIf(SKIP is not None, SKIP or "")
class NamesAndConfigTest(unittest.TestCase):
    def test_release_names_to_hf(self):
        # The table, the experts (w1/w3 stacked in gate_up_proj, w2 in down_proj), head and norm;
        # mtp.* and the scales have no HF name.
        from tdiff_capture.release import LAYER, hf_name
        self.assertEqual(hf_name("layers.12.attn.indexer.compressor.norm.weight"),
                         "model.layers.12.self_attn.compressor.indexer.kv_norm.weight")
        self.assertEqual(hf_name("layers.3.ffn.experts.255.w3.weight"), "model.layers.3.mlp.experts.gate_up_proj")
        self.assertEqual(hf_name("layers.3.ffn.experts.7.w2.weight"), "model.layers.3.mlp.experts.down_proj")
        self.assertEqual(hf_name("head.weight"), "lm_head.weight")
        self.assertEqual(hf_name("norm.weight"), "model.norm.weight")
        self.assertIsNone(hf_name("mtp.0.emb.weight"))
        self.assertIsNone(hf_name("layers.1.attn.wq_a.scale"))
        self.assertEqual(len(set(LAYER.values())), len(LAYER))

    def test_v4_flash_release_config(self):
        # V4-Flash's release keys (model-spec §1.2, 1.3): 2 sliding, 21 CSA, 20 HCA (the MTP entry
        # dropped), hash 0-2, rates {4, 128}, rotary 0.125, yarn kept, quantisation and MTP keys dropped.
        from tdiff_capture.release import RELEASE_ONLY, hf_config
        flash = {"model_type": "deepseek_v4", "num_hidden_layers": 43, "head_dim": 512, "qk_rope_head_dim": 64,
                 "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0], "num_hash_layers": 3,
                 "rope_scaling": {"type": "yarn", "factor": 16}, "num_nextn_predict_layers": 1,
                 "topk_method": "noaux_tc", "expert_dtype": "fp4", "quantization_config": {"quant_method": "fp8"}}
        c = hf_config(flash)
        self.assertEqual(c["layer_types"][:4], ["sliding_attention", "sliding_attention",
                                                "compressed_sparse_attention", "heavily_compressed_attention"])
        self.assertEqual(len(c["layer_types"]), 43)
        self.assertEqual(c["layer_types"].count("compressed_sparse_attention"), 21)
        self.assertEqual(c["layer_types"][42], "compressed_sparse_attention")
        self.assertEqual(c["mlp_layer_types"], ["hash_moe"] * 3 + ["moe"] * 40)
        self.assertEqual(c["partial_rotary_factor"], 0.125)
        self.assertEqual(c["compress_rates"], {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128})
        self.assertEqual(c["rope_scaling"], flash["rope_scaling"])
        self.assertFalse(set(RELEASE_ONLY) & set(c))


if __name__ == "__main__":
    unittest.main()
