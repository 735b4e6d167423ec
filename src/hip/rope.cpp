// The rope family on the device: rope_table, rope, rope_inverse, entry_rope (hip/rope.h;
// knobs: emu::rope_spec).
#include "emu/rope.h"
#include "hip/rope.h"
#include "hip/stage_call.h"

namespace tdiff::hip {

namespace {

std::vector<Tensor> run_rope_table(StageCall& k) {
  const auto half = k.c.rope_dim / 2;
  auto cos_t = k.out({k.B, k.S, half}, arith::Fmt::f32), sin_t = k.out({k.B, k.S, half}, arith::Fmt::f32);
  rope_tables(k.i64(0), k.N, k.rope_freq(k.s.compress_rope), half, emu::rope_spec(k.num).angle, cos_t.f(), sin_t.f(), k.cs);
  k.emit(std::move(cos_t));
  k.emit(std::move(sin_t));
  return k.outputs();
}

std::vector<Tensor> run_rope(StageCall& k) {
  const Shape sh = k.shape(0);
  const emu::RopeSpec spec = emu::rope_spec(k.num);
  const std::int64_t rows = rows_of(sh), per_token = rows / k.N;
  auto y = k.out(sh, spec.out);
  rope_rotate(k.load(0, spec.out), rows, sh.back(), k.c.rope_dim, k.load_f32(1), k.load_f32(2), per_token, k.N,
              k.s.kind == OpKind::rope_inverse, spec.out, y.f(), k.cs);
  k.emit(std::move(y));
  return k.outputs();
}

// Compressed entries rotated at their positions w · rate (tables of their own).
std::vector<Tensor> run_entry_rope(StageCall& k) {
  const Shape sh = k.shape(0);
  const emu::RopeSpec spec = emu::rope_spec(k.num);
  const auto n = sh.at(1), half = k.c.rope_dim / 2;
  std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
  for (std::int64_t w = 0; w < n; ++w) positions[static_cast<std::size_t>(w)] = w * k.s.rate;
  auto* d_pos = k.scratch_of<std::int64_t>(n);
  copy_h2d(d_pos, positions.data(), positions.size() * 8, k.cs);
  float* cos_t = k.scratch(n * half);
  float* sin_t = k.scratch(n * half);
  rope_tables(d_pos, n, k.rope_freq(true), half, spec.angle, cos_t, sin_t, k.cs);
  auto y = k.out(sh, spec.out);
  rope_rotate(k.load(0, spec.out), k.B * n, sh.back(), k.c.rope_dim, cos_t, sin_t, 1, n, false, spec.out, y.f(), k.cs);
  stream_sync(k.cs);  // positions is a temporary
  k.emit(std::move(y));
  return k.outputs();
}

}  // namespace

void register_rope(Handlers& h) {
  h.add(OpKind::rope_table, run_rope_table);
  h.add({OpKind::rope, OpKind::rope_inverse}, run_rope);
  h.add(OpKind::entry_rope, run_entry_rope);
}

}  // namespace tdiff::hip
