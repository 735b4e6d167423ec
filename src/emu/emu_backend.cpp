#include "emu/emu_backend.h"

#include "emu/stage_call.h"

namespace tdiff::emu {

namespace {

const Handlers& handlers() {
  static const Handlers table = build_handler_table<StageCall>(
      "emu", {register_embedding, register_hyper_connection, register_rope, register_mask, register_norm,
              register_linear, register_compressor, register_indexer, register_attention, register_moe});
  return table;
}

}  // namespace

bool EmuBackend::implements(OpKind kind) const { return handlers().has(kind); }

std::vector<Tensor> EmuBackend::run(const Stage& s, const std::vector<const Tensor*>& in, RunContext& ctx) {
  if (policy_.split().active()) check_split(policy_.split(), ctx.config);  // a model the split cannot divide
  StageCall call(*this, s, in, ctx);
  return handlers().run(s, call);
}

const std::vector<float>& EmuBackend::gemm_weight(WeightStore& w, const std::string& name, Fmt in) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_pair(name, static_cast<int>(in));
  auto it = weight_cache_.find(key);
  if (it != weight_cache_.end()) return it->second;
  const Tensor& t = w.f64(name);
  const std::int64_t cols = t.dim(-1), rows = t.numel() / cols;
  return weight_cache_.emplace(key, quantize_weight(t.data<double>(), rows, cols, in)).first->second;
}

void EmuBackend::keep_partials(const std::string& key, RankPartials p) {
  std::lock_guard<std::mutex> lock(mutex_);
  partials_[key] = std::move(p);
}

std::optional<EmuBackend::RankPartials> EmuBackend::take_partials(const std::string& key, const Tensor& given) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = partials_.find(key);
  if (it == partials_.end()) return std::nullopt;
  RankPartials p = std::move(it->second);
  partials_.erase(it);
  if (given.dtype() != DType::f64 || static_cast<std::size_t>(given.numel()) != p.sum.size()) return std::nullopt;
  const double* d = given.data<double>();
  for (std::size_t i = 0; i < p.sum.size(); ++i)
    if (d[i] != p.sum[i]) return std::nullopt;
  return p;
}

std::map<std::string, EmuBackend::OrderProbe> EmuBackend::order_probes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return probes_;
}

std::vector<float> EmuBackend::all_reduce(const std::string& stage, const std::vector<std::vector<float>>& partials,
                                          const ReduceSpec& spec) {
  std::vector<float> out = reduce_ranks(partials, spec);
  if (!probe_) return out;
  ReduceSpec other = spec;
  other.order = spec.order == AllReduce::tree ? AllReduce::ring : AllReduce::tree;
  const std::vector<float> alt = reduce_ranks(partials, other);
  std::int64_t differing = 0;
  for (std::size_t i = 0; i < out.size(); ++i) differing += arith::float_bits(out[i]) != arith::float_bits(alt[i]);
  std::lock_guard<std::mutex> lock(mutex_);
  OrderProbe& p = probes_[stage];
  p.ranks = static_cast<int>(partials.size());
  p.elements += static_cast<std::int64_t>(out.size());
  p.differing += differing;
  return out;
}

std::vector<float> StageCall::all_reduce(const std::vector<std::vector<float>>& partials) {
  return be.all_reduce(s.name, partials, ReduceSpec{split.allreduce, st, split.channels});
}

Tensor StageCall::keep_or_reduce(const std::string& tensor, const std::vector<std::vector<float>>& partials, Shape shape) {
  if (split.moe_reduce == MoeReduce::reduce_each) return store(all_reduce(partials), std::move(shape));
  EmuBackend::RankPartials p{partials, std::vector<double>(partials.at(0).size(), 0.0)};
  for (const auto& r : partials)
    for (std::size_t i = 0; i < r.size(); ++i) p.sum[i] += r[i];
  Tensor t(DType::f64, std::move(shape));
  std::copy(p.sum.begin(), p.sum.end(), t.data<double>());
  be.keep_partials(s.name + "/" + tensor, std::move(p));
  return t;
}

StageCall::StageCall(EmuBackend& be, const Stage& s, const std::vector<const Tensor*>& in, RunContext& ctx)
    : StageFacts(be.policy_, be.run_seed_, s, in, ctx), be(be) {}

std::vector<float> StageCall::load(std::size_t i, Fmt f) const {
  const Tensor* t = in.at(i);
  std::vector<float> v(static_cast<std::size_t>(t->numel()));
  if (t->dtype() == DType::f32) {  // a candidate's float32 output (hip copies them as stored)
    const float* d = t->data<float>();
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = arith::round_fmt(d[k], f);
    return v;
  }
  const double* d = t->data<double>();
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = arith::round_fmt(static_cast<float>(d[k]), f);
  return v;
}

const std::vector<float>& StageCall::gemm_weight(std::size_t i, Fmt in) {
  return be.gemm_weight(ctx.weights, s.weights.at(i), in);
}

std::vector<Tensor> StageCall::refcpu_outputs() { return be.refcpu_.run(s, in, ctx); }

Tensor store(const std::vector<float>& v, Shape shape) {
  Tensor t(DType::f64, std::move(shape));
  double* d = t.data<double>();
  for (std::size_t i = 0; i < v.size(); ++i) d[i] = v[i];
  return t;
}

std::vector<float> to_float(const Tensor& w) {
  std::vector<float> v(static_cast<std::size_t>(w.numel()));
  const double* d = w.data<double>();
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(d[i]);
  return v;
}

std::int64_t rows_of(const Tensor& t) { return t.numel() / t.dim(-1); }

std::vector<float> operand(std::vector<float> x, std::int64_t rows, std::int64_t K, Fmt in) {
  quantize_activations(x, rows, K, in);
  return x;
}

}  // namespace tdiff::emu
