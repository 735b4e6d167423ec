#include "exec/conditioning.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/dtype.h"

namespace tdiff {

namespace {

bool perturbed_input(const Stage& s, std::size_t i, const Tensor* t) {
  return s.inputs[i].stage != "inputs" && t && t->defined() && is_float(t->dtype());
}

std::uint64_t mix(std::uint64_t z) {  // splitmix64's finaliser: a counter-based generator
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A standard normal draw for element j of one probe's stream (Box-Muller on two hashes), so
// any element is drawn alone and the probes are the same for every thread count.
double gaussian(std::uint64_t stream, std::int64_t j) {
  const std::uint64_t a = mix(stream ^ mix(2 * static_cast<std::uint64_t>(j)));
  const std::uint64_t b = mix(stream ^ mix(2 * static_cast<std::uint64_t>(j) + 1));
  const double u1 = (static_cast<double>(a >> 11) + 0.5) * 0x1p-53, u2 = static_cast<double>(b >> 11) * 0x1p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

std::uint64_t stream_of(const std::string& stage, int probe, std::size_t input) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the stage's name
  for (const char c : stage) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return mix(h ^ mix(static_cast<std::uint64_t>(probe) << 32 | input));
}

// x_j (1 + ε ξ_j) in float64.
Tensor perturbed(const Tensor& x, std::uint64_t stream) {
  Tensor y = x.to(DType::f64);
  double* v = y.data<double>();
  const std::int64_t n = y.numel();
#pragma omp parallel for schedule(static)
  for (std::int64_t j = 0; j < n; ++j) v[j] *= 1.0 + kConditioningEpsilon * gaussian(stream, j);
  return y;
}

// Row gains and G from the probes' summed squared changes (Σ_p (y'_i - y_i)², in `sq`).
StoredConditioning gains(const Tensor& y, const std::vector<double>& sq, int probes, int m) {
  const std::int64_t n = y.numel();
  const std::int64_t row = y.rank() >= 2 ? std::max<std::int64_t>(1, y.dim(-1)) : std::max<std::int64_t>(1, n);
  double yy = 0, dd = 0;
  std::int64_t finite = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = y.value(i);
    if (!std::isfinite(v) || !std::isfinite(sq[static_cast<std::size_t>(i)])) continue;
    yy += v * v, dd += sq[static_cast<std::size_t>(i)], ++finite;
  }
  const double unit = kConditioningEpsilon * std::sqrt(static_cast<double>(m));
  const double rms = finite ? std::sqrt(yy / static_cast<double>(finite)) : 0.0;
  StoredConditioning c;
  c.gain_l2 = yy > 0 ? std::max(1.0, std::sqrt(dd / probes / yy) / unit) : 1.0;
  c.row_gain = Tensor(DType::f32, conditioning_shape(y.shape()));
  float* g = c.row_gain.data<float>();
  for (std::int64_t r = 0; r * row < n; ++r) {
    double best = 1.0;
    for (std::int64_t i = r * row; i < std::min(n, (r + 1) * row); ++i) {
      const double v = y.value(i), s = sq[static_cast<std::size_t>(i)];
      const double scale = unit * (std::fabs(v) + rms);
      if (std::isfinite(v) && std::isfinite(s) && scale > 0) best = std::max(best, std::sqrt(s / probes) / scale);
    }
    g[r] = static_cast<float>(best);
  }
  return c;
}

}  // namespace

bool has_conditioning(const Stage& s, const std::vector<const Tensor*>& inputs) {
  for (std::size_t i = 0; i < inputs.size() && i < s.inputs.size(); ++i)
    if (perturbed_input(s, i, inputs[i])) return true;
  return false;
}

std::vector<std::optional<StoredConditioning>> probe_conditioning(const Stage& s, const std::vector<const Tensor*>& inputs,
                                                                  const std::vector<Tensor>& outputs, Backend& reference,
                                                                  RunContext& ctx, int probes) {
  std::vector<std::optional<StoredConditioning>> out(outputs.size());
  int m = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) m += perturbed_input(s, i, inputs[i]);
  if (m == 0 || probes <= 0) return out;
  std::vector<std::vector<double>> sq(outputs.size());
  for (std::size_t k = 0; k < outputs.size(); ++k)
    if (is_float(outputs[k].dtype())) sq[k].assign(static_cast<std::size_t>(outputs[k].numel()), 0.0);
  for (int p = 0; p < probes; ++p) {
    std::vector<Tensor> held(inputs.size());
    std::vector<const Tensor*> in(inputs);
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (perturbed_input(s, i, inputs[i])) {
        held[i] = perturbed(*inputs[i], stream_of(s.name, p, i));
        in[i] = &held[i];
      }
    const std::vector<Tensor> y = reference.run(s, in, ctx);
    for (std::size_t k = 0; k < outputs.size(); ++k) {
      if (sq[k].empty()) continue;
      const std::int64_t n = outputs[k].numel();
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
        const double d = y[k].value(i) - outputs[k].value(i);
        sq[k][static_cast<std::size_t>(i)] += d * d;
      }
    }
  }
  for (std::size_t k = 0; k < outputs.size(); ++k)
    if (!sq[k].empty()) out[k] = gains(outputs[k], sq[k], probes, m);
  return out;
}

}  // namespace tdiff
