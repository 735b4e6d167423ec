#include "refcpu/refcpu_backend.h"

#include <fmt/format.h>

#include "refcpu/stage_call.h"

namespace tdiff::refcpu {

namespace {

const Handlers& handlers() {
  static const Handlers table = build_handler_table<StageCall>(
      "refcpu", {register_embedding, register_hyper_connection, register_rope, register_mask, register_norm,
                 register_linear, register_compressor, register_indexer, register_attention, register_moe});
  return table;
}

}  // namespace

// Inputs arrive from the executor, possibly converted from another backend: float64 here.
const double* StageCall::f64(std::size_t i) const {
  const Tensor* t = in[i];
  if (t->dtype() != DType::f64)
    throw std::logic_error(fmt::format("{}: input {} has dtype {}, refcpu needs f64", s.name, i, dtype_name(t->dtype())));
  return t->data<double>();
}

Shape with_last(Shape s, std::int64_t last) {
  s.back() = last;
  return s;
}

std::int64_t rows_of(const Tensor& t, int trailing) {
  std::int64_t r = 1;
  for (int i = 0; i < t.rank() - trailing; ++i) r *= t.dim(i);
  return r;
}

bool RefCpuBackend::implements(OpKind kind) const { return handlers().has(kind); }

std::vector<Tensor> RefCpuBackend::run(const Stage& s, const std::vector<const Tensor*>& given, RunContext& ctx) {
  // A candidate's narrower float outputs (hip copies them as stored) widened exactly to float64.
  std::vector<Tensor> widened;
  widened.reserve(given.size());
  std::vector<const Tensor*> in = given;
  for (auto& t : in)
    if (t && is_float(t->dtype()) && t->dtype() != DType::f64) t = &widened.emplace_back(t->to(DType::f64));
  const std::int64_t B = ctx.batch.rows(), S = ctx.batch.seq();
  StageCall call{s, in, ctx, ctx.config, ctx.batch, B, S, B * S};
  return handlers().run(s, call);
}

}  // namespace tdiff::refcpu
