// The attention family on the device (hip/attention.h; knobs: emu::attention_spec).
#include "hip/attention.h"
#include "hip/gemm.h"
#include "hip/stage_call.h"

namespace tdiff::hip {

namespace {

std::vector<Tensor> run_attention(StageCall& k) {
  const auto H = k.c.num_attention_heads, d = k.c.head_dim, B = k.B, S = k.S;
  const bool compressed = k.in.size() > 3;
  const auto n = compressed ? k.shape(3).at(1) : 0;
  const emu::AttentionSpec spec = emu::attention_spec(k.num, d);
  auto o = k.out({B, S, H, d}, k.st);
  const float* kv = k.load(1, k.st);
  const float* C = compressed ? k.load(3, k.st) : nullptr;
  // On the matrix cores the keys (= values) are read as 16-bit operand patterns.
  std::uint16_t *kv16 = nullptr, *C16 = nullptr;
  if (attention_on_matrix_cores(spec, k.matrix_cores())) {
    kv16 = k.scratch_of<std::uint16_t>(B * S * d);
    quantize_activations_bits16(kv, kv16, B * S * d, k.st, k.cs);
    if (n > 0) {
      C16 = k.scratch_of<std::uint16_t>(B * n * d);
      quantize_activations_bits16(C, C16, B * n * d, k.st, k.cs);
    }
  }
  attention(k.load(0, k.st), kv, k.u8(2), C, compressed ? k.u8(4) : nullptr, B, S, n, H, d, k.weight(0), spec, o.f(), k.cs,
            kv16, C16);
  k.emit(std::move(o));
  return k.outputs();
}

}  // namespace

void register_attention(Handlers& h) { h.add(OpKind::attention, run_attention); }

}  // namespace tdiff::hip
