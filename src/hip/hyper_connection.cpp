// The hyper-connection family on the device: hc_expand (hip/elementwise.h), hc_mix,
// hc_sinkhorn, hc_pre, hc_post, hc_head (hip/hyper_connection.h; knobs: emu::hc_spec).
#include "hip/elementwise.h"
#include "hip/hyper_connection.h"
#include "hip/stage_call.h"

namespace tdiff::hip {

namespace {

using arith::Fmt;

std::vector<Tensor> run_hc_expand(StageCall& k) {
  const auto D = k.c.hidden_size, n = k.c.hc_mult;
  auto X = k.out({k.B, k.S, n, D}, k.sf);
  hc_expand(k.load_f32(0), k.N, n, D, k.st, k.sf, X.f(), k.cs);
  k.emit(std::move(X));
  return k.outputs();
}

std::vector<Tensor> run_hc_mix(StageCall& k) {
  const auto M = k.c.hc_mix_width(), flat = k.c.hc_mult * k.c.hidden_size;
  auto mix = k.out({k.B, k.S, M}, Fmt::f32);
  hc_mix(k.load(0, k.sf), k.N, flat, k.weight(0), M, k.eps, emu::hc_spec(k.num), mix.f(), k.cs);
  k.emit(std::move(mix));
  return k.outputs();
}

std::vector<Tensor> run_hc_sinkhorn(StageCall& k) {
  const auto n = k.c.hc_mult, B = k.B, S = k.S;
  auto pre = k.out({B, S, n}, Fmt::f32), post = k.out({B, S, n}, Fmt::f32), comb = k.out({B, S, n, n}, Fmt::f32);
  hc_sinkhorn(k.load_f32(0), k.N, n, k.weight(0), k.weight(1), static_cast<float>(k.c.hc_eps), k.c.hc_sinkhorn_iters,
              emu::hc_spec(k.num), pre.f(), post.f(), comb.f(), k.cs);
  k.emit(std::move(pre));
  k.emit(std::move(post));
  k.emit(std::move(comb));
  return k.outputs();
}

// The collapse is cast to the stream dtype (model-spec §3.7), as emu.
std::vector<Tensor> run_hc_pre(StageCall& k) {
  auto x = k.out({k.B, k.S, k.c.hidden_size}, k.sf);
  hc_pre(k.load(0, k.sf), k.load_f32(1), k.N, k.c.hc_mult, k.c.hidden_size, k.sf, x.f(), k.cs);
  k.emit(std::move(x));
  return k.outputs();
}

std::vector<Tensor> run_hc_post(StageCall& k) {
  auto X = k.out(k.shape(0), k.sf);
  hc_post(k.load(0, k.sf), k.load(1, k.st), k.load_f32(2), k.load_f32(3), k.N, k.c.hc_mult, k.c.hidden_size, k.sf, X.f(),
          k.cs);
  k.emit(std::move(X));
  return k.outputs();
}

std::vector<Tensor> run_hc_head(StageCall& k) {
  const auto n = k.c.hc_mult, D = k.c.hidden_size;
  auto y = k.out({k.B, k.S, D}, k.sf), preh = k.out({k.B, k.S, n}, Fmt::f32);
  hc_head(k.load(0, k.sf), k.N, n, D, k.weight(0), k.weight(1), k.weight(2), k.eps, static_cast<float>(k.c.hc_eps),
          emu::hc_spec(k.num), k.sf, y.f(), preh.f(), k.cs);
  k.emit(std::move(y));
  k.emit(std::move(preh));
  return k.outputs();
}

}  // namespace

void register_hyper_connection(Handlers& h) {
  h.add(OpKind::hc_expand, run_hc_expand);
  h.add(OpKind::hc_mix, run_hc_mix);
  h.add(OpKind::hc_sinkhorn, run_hc_sinkhorn);
  h.add(OpKind::hc_pre, run_hc_pre);
  h.add(OpKind::hc_post, run_hc_post);
  h.add(OpKind::hc_head, run_hc_head);
}

}  // namespace tdiff::hip
