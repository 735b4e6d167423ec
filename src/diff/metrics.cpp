#include "diff/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <variant>

#include "base/error.h"

namespace tdiff {

namespace {

// Fixed chunking: the partial sums of a chunk never depend on which thread computed it,
// and chunks are combined in index order, so the result is independent of thread count.
constexpr std::int64_t kChunk = 1 << 16;
// Four independent accumulators (one vector) per sum: the order of additions is fixed by
// this code, not by the compiler, and is the same on every machine and for every clone.
constexpr int kLanes = 4;
using v4d = double __attribute__((vector_size(32)));
using v4l = std::int64_t __attribute__((vector_size(32)));

struct Partial {
  double rr = 0, cc = 0, rc = 0, dd = 0;
  double max_abs = 0, max_abs_ref = 0, max_rel = 0, max_abs_scaled = 0;
  std::int64_t compared = 0, n_diff = 0;
  std::int64_t nan_ref = 0, inf_ref = 0, nan_cand = 0, inf_cand = 0, new_nonfinite = 0;
  std::int64_t first_new_nonfinite = -1;  // inside the chunk until chunk_partial offsets it
};

// |d| / max(s, |r|): written once, so that the argmax rescan divides exactly as the kernels do.
inline double scaled_abs(double abs_d, double abs_r, double s = 1.0) { return abs_d / std::max(s, abs_r); }

// Four consecutive elements of r and c widened to double (built element by element: the
// compiler turns this into one widening load each), and |v| by clearing the sign bits.
// Always inlined, so each instruction-set version of the kernels below compiles them for its
// own instruction set; results through references, as a vector return would change the ABI.
template <class TR, class TC>
__attribute__((always_inline)) inline void widen4(const TR* r, const TC* c, v4d& a, v4d& b) {
  a = v4d{static_cast<double>(r[0]), static_cast<double>(r[1]), static_cast<double>(r[2]), static_cast<double>(r[3])};
  b = v4d{static_cast<double>(c[0]), static_cast<double>(c[1]), static_cast<double>(c[2]), static_cast<double>(c[3])};
}
constexpr std::int64_t kNoSign = std::numeric_limits<std::int64_t>::max();
#define TDIFF_ABS4(v) ((v4d)((v4l)(v) & v4l{kNoSign, kNoSign, kNoSign, kNoSign}))

// An AVX2 version and a baseline version of each kernel, chosen once per process by what the
// CPU has. Explicit dispatch rather than target_clones: GCC and clang both take a target
// attribute on a template, while clang (14) refuses target_clones there.
#if defined(__x86_64__) || defined(__i386__)
inline bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#define TDIFF_DISPATCH_AVX2(ret, name, params, args)                                          \
  template <class TR, class TC>                                                               \
  __attribute__((target("avx2"))) ret name##_avx2 params { return name##_body args; }         \
  template <class TR, class TC>                                                               \
  ret name##_base params { return name##_body args; }                                         \
  template <class TR, class TC>                                                               \
  ret name params { return cpu_has_avx2() ? name##_avx2 args : name##_base args; }
#else
#define TDIFF_DISPATCH_AVX2(ret, name, params, args) \
  template <class TR, class TC>                      \
  ret name params { return name##_body args; }
#endif

// Branch-free kernel for chunks without NaN/Inf. Returns false when a non-finite value was
// seen (its squares then poison rr or cc), and the caller redoes the chunk carefully.
// Compiled twice through TDIFF_DISPATCH_AVX2 below; no FMA, so both versions round identically.
template <class TR, class TC>
__attribute__((always_inline)) inline bool fast_chunk_body(const TR* r, const TC* c, std::int64_t n, double floor,
                                                           Partial& p) {
  v4d rr = {}, cc = {}, rc = {}, dd = {}, ma = {}, mr = {}, mq = {}, ms = {};
  v4l nd = {};
  const v4d fl = {floor, floor, floor, floor};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    v4d a, b;
    widen4(r + i, c + i, a, b);
    const v4d d = b - a;
    const v4d ad = TDIFF_ABS4(d), ar = TDIFF_ABS4(a);
    rr += a * a;
    cc += b * b;
    rc += a * b;
    dd += d * d;
    ma = ad > ma ? ad : ma;
    mr = ar > mr ? ar : mr;
    const v4d q = ad / (ar > fl ? ar : fl);
    mq = q > mq ? q : mq;
    // ad / max(1, ar) without a second division: min(ad, q) is q = ad / ar where ar >= 1 (the
    // floor being <= 1) and ad below, exactly (the caller takes the careful path otherwise).
    const v4d s = ad < q ? ad : q;
    ms = s > ms ? s : ms;
    nd -= d != 0.0;  // a true comparison is -1
  }
  for (int j = 0; j < kLanes; ++j) {
    p.rr += rr[j], p.cc += cc[j], p.rc += rc[j], p.dd += dd[j], p.n_diff += nd[j];
    p.max_abs = std::max(p.max_abs, ma[j]);
    p.max_abs_ref = std::max(p.max_abs_ref, mr[j]);
    p.max_rel = std::max(p.max_rel, mq[j]);
    p.max_abs_scaled = std::max(p.max_abs_scaled, ms[j]);
  }
  for (; i < n; ++i) {  // the tail, in element order after the lanes
    const double a = static_cast<double>(r[i]), b = static_cast<double>(c[i]), d = b - a;
    const double ad = std::fabs(d), ar = std::fabs(a);
    p.rr += a * a, p.cc += b * b, p.rc += a * b, p.dd += d * d, p.n_diff += d != 0.0;
    p.max_abs = std::max(p.max_abs, ad);
    p.max_abs_ref = std::max(p.max_abs_ref, ar);
    p.max_rel = std::max(p.max_rel, ad / std::max(ar, floor));
    p.max_abs_scaled = std::max(p.max_abs_scaled, scaled_abs(ad, ar));
  }
  p.compared = n;
  return std::isfinite(p.rr) && std::isfinite(p.cc);
}
TDIFF_DISPATCH_AVX2(bool, fast_chunk, (const TR* r, const TC* c, std::int64_t n, double floor, Partial& p),
                    (r, c, n, floor, p))

// Element by element, for chunks holding NaN or Inf: those are counted, not summed.
template <class TR, class TC>
void careful_chunk(const TR* r, const TC* c, std::int64_t n, double floor, Partial& p) {
  p = Partial{};
  for (std::int64_t i = 0; i < n; ++i) {
    const double a = static_cast<double>(r[i]), b = static_cast<double>(c[i]);
    const bool fa = std::isfinite(a), fb = std::isfinite(b);
    p.nan_ref += std::isnan(a), p.inf_ref += std::isinf(a);
    p.nan_cand += std::isnan(b), p.inf_cand += std::isinf(b);
    const bool same_nonfinite = (std::isnan(a) && std::isnan(b)) || (!fa && a == b);
    if (!fb && !same_nonfinite && p.new_nonfinite++ == 0) p.first_new_nonfinite = i;
    if (!(fa && fb)) {
      p.n_diff += !same_nonfinite;
      continue;
    }
    const double d = b - a, ad = std::fabs(d), ar = std::fabs(a);
    p.rr += a * a, p.cc += b * b, p.rc += a * b, p.dd += d * d;
    p.max_abs = std::max(p.max_abs, ad);
    p.max_abs_ref = std::max(p.max_abs_ref, ar);
    p.max_rel = std::max(p.max_rel, ad / std::max(ar, floor));
    p.max_abs_scaled = std::max(p.max_abs_scaled, scaled_abs(ad, ar));
    p.n_diff += d != 0.0;
    ++p.compared;
  }
}

// One side of a chunk as float or double pointers; other dtypes are widened into `buf`.
using Elems = std::variant<const float*, const double*>;
Elems chunk_elems(const Tensor& t, std::int64_t begin, std::int64_t n, std::vector<double>& buf) {
  if (t.dtype() == DType::f32) return t.data<float>() + begin;
  if (t.dtype() == DType::f64) return t.data<double>() + begin;
  buf.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) buf[static_cast<std::size_t>(i)] = t.value(begin + i);
  return static_cast<const double*>(buf.data());
}

Partial chunk_partial(const Tensor& ref, const Tensor& cand, std::int64_t begin, std::int64_t n, double floor,
                      std::vector<double>& buf_r, std::vector<double>& buf_c) {
  Partial p;
  std::visit(
      [&](auto r, auto c) {
        // The fast kernel shares max_rel's division with max_abs_scaled, which needs floor <= 1.
        if (floor > 1.0 || !fast_chunk(r, c, n, floor, p)) careful_chunk(r, c, n, floor, p);
      },
      chunk_elems(ref, begin, n, buf_r), chunk_elems(cand, begin, n, buf_c));
  if (p.first_new_nonfinite >= 0) p.first_new_nonfinite += begin;
  return p;
}

// max |d| / max(s, |r|) over one chunk (the second pass, s > 1): four lanes as in
// fast_chunk for chunks of finite values; element by element, skipping non-finite pairs,
// for the chunks the first pass found NaN/Inf in. A maximum is exact in any order.
template <class TR, class TC>
__attribute__((always_inline)) inline double fast_scaled_max_body(const TR* r, const TC* c, std::int64_t n, double s) {
  v4d ms = {};
  const v4d sv = {s, s, s, s};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    v4d a, b;
    widen4(r + i, c + i, a, b);
    const v4d ad = TDIFF_ABS4(b - a), ar = TDIFF_ABS4(a);
    const v4d q = ad / (ar > sv ? ar : sv);
    ms = q > ms ? q : ms;
  }
  double m = 0;
  for (int j = 0; j < kLanes; ++j) m = std::max(m, ms[j]);
  for (; i < n; ++i) m = std::max(m, scaled_abs(std::fabs(double(c[i]) - double(r[i])), std::fabs(double(r[i])), s));
  return m;
}
TDIFF_DISPATCH_AVX2(double, fast_scaled_max, (const TR* r, const TC* c, std::int64_t n, double s), (r, c, n, s))

#undef TDIFF_ABS4
#undef TDIFF_DISPATCH_AVX2


double chunk_scaled_max(const Tensor& ref, const Tensor& cand, std::int64_t begin, std::int64_t n, double s,
                        bool finite, std::vector<double>& buf_r, std::vector<double>& buf_c) {
  double m = 0;
  std::visit(
      [&](auto r, auto c) {
        if (finite) {
          m = fast_scaled_max(r, c, n, s);
          return;
        }
        for (std::int64_t i = 0; i < n; ++i) {
          const double a = static_cast<double>(r[i]), b = static_cast<double>(c[i]);
          if (std::isfinite(a) && std::isfinite(b)) m = std::max(m, scaled_abs(std::fabs(b - a), std::fabs(a), s));
        }
      },
      chunk_elems(ref, begin, n, buf_r), chunk_elems(cand, begin, n, buf_c));
  return m;
}

// err_rel's maximum over one chunk and its first element (-1: none), skipping non-finite
// pairs; a plain loop, as it runs once per tensor after rms(r) is known.
struct ErrMax {
  double value = 0;
  std::int64_t at = -1;
};
ErrMax chunk_err_max(const Tensor& ref, const Tensor& cand, std::int64_t begin, std::int64_t n, double rms,
                     std::vector<double>& buf_r, std::vector<double>& buf_c) {
  ErrMax m;
  std::visit(
      [&](auto r, auto c) {
        for (std::int64_t i = 0; i < n; ++i) {
          const double a = static_cast<double>(r[i]), b = static_cast<double>(c[i]);
          if (!std::isfinite(a) || !std::isfinite(b)) continue;
          const double d = std::fabs(b - a), e = d == 0.0 ? 0.0 : d / (std::fabs(a) + rms);
          if (e > m.value || m.at < 0) m = {e, begin + i};
        }
      },
      chunk_elems(ref, begin, n, buf_r), chunk_elems(cand, begin, n, buf_c));
  return m;
}

// rel_elem (metrics.h): a median, so a sample at a fixed stride keeps it cheap and the same for
// every thread count; 0.4549 is the median of ξ² for a standard normal ξ.
double typical_element_error(const Tensor& ref, const Tensor& cand) {
  constexpr std::int64_t kSample = 1 << 20;
  const std::int64_t n = ref.numel(), stride = std::max<std::int64_t>(1, (n + kSample - 1) / kSample);
  std::vector<double> q;
  q.reserve(static_cast<std::size_t>(n / stride + 1));
  for (std::int64_t i = 0; i < n; i += stride) {
    const double a = ref.value(i), b = cand.value(i);
    if (a != 0.0 && std::isfinite(a) && std::isfinite(b)) q.push_back(((b - a) / a) * ((b - a) / a));
  }
  if (q.empty()) return 0.0;
  auto mid = q.begin() + static_cast<std::ptrdiff_t>(q.size() / 2);
  std::nth_element(q.begin(), mid, q.end());
  return std::sqrt(*mid / 0.4549);
}

void check_shapes(const Tensor& ref, const Tensor& cand, const char* what) {
  if (ref.shape() != cand.shape())
    input_error("{}: shape mismatch, reference {} vs candidate {}", what, shape_str(ref.shape()),
                shape_str(cand.shape()));
}

// f(k, begin, len, buf_r, buf_c) for every kChunk-element chunk k of n elements, on all
// threads, each thread with its own widening buffers; results go to per-chunk slots, so the
// caller combines them in chunk order whatever the thread count.
template <class F>
void for_each_chunk(std::int64_t n, F&& f) {
  const std::int64_t nchunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel
  {
    std::vector<double> buf_r, buf_c;
#pragma omp for schedule(static)
    for (std::int64_t k = 0; k < nchunks; ++k) f(k, k * kChunk, std::min(kChunk, n - k * kChunk), buf_r, buf_c);
  }
}

// err_rel = max |d_i| / (|r_i| + rms(r)) and where it is; a zero reference with a nonzero
// difference is infinitely far (0/0 elements, both zero, count as no error).
void set_err_rel(const Tensor& ref, const Tensor& cand, TensorMetrics& m) {
  const std::int64_t n = ref.numel(), nchunks = (n + kChunk - 1) / kChunk;
  std::vector<ErrMax> parts(static_cast<std::size_t>(nchunks));
  for_each_chunk(n, [&](std::int64_t k, std::int64_t begin, std::int64_t len, std::vector<double>& buf_r,
                        std::vector<double>& buf_c) {
    parts[static_cast<std::size_t>(k)] = chunk_err_max(ref, cand, begin, len, m.ref_rms, buf_r, buf_c);
  });
  ErrMax best;
  for (const ErrMax& p : parts)
    if (p.at >= 0 && (p.value > best.value || best.at < 0)) best = p;
  if (best.at < 0) return;
  m.err_rel = best.value;
  m.argmax_err_rel = best.at;
  m.ref_at_err = ref.value(best.at);
  m.cand_at_err = cand.value(best.at);
}

}  // namespace

TensorMetrics tensor_metrics(const Tensor& ref, const Tensor& cand, const MetricOptions& opt) {
  check_shapes(ref, cand, "tensor metrics");
  const std::int64_t n = ref.numel();
  const std::int64_t nchunks = (n + kChunk - 1) / kChunk;
  std::vector<Partial> parts(static_cast<std::size_t>(nchunks));
  for_each_chunk(n, [&](std::int64_t k, std::int64_t begin, std::int64_t len, std::vector<double>& buf_r,
                        std::vector<double>& buf_c) {
    parts[static_cast<std::size_t>(k)] = chunk_partial(ref, cand, begin, len, opt.rel_floor, buf_r, buf_c);
  });

  Partial t;
  std::int64_t worst_chunk = -1, worst_scaled_chunk = -1;
  for (std::int64_t k = 0; k < nchunks; ++k) {
    const Partial& p = parts[static_cast<std::size_t>(k)];
    t.rr += p.rr, t.cc += p.cc, t.rc += p.rc, t.dd += p.dd;
    if (p.max_abs > t.max_abs || worst_chunk < 0) t.max_abs = p.max_abs, worst_chunk = k;
    if (p.max_abs_scaled > t.max_abs_scaled || worst_scaled_chunk < 0)
      t.max_abs_scaled = p.max_abs_scaled, worst_scaled_chunk = k;
    t.max_abs_ref = std::max(t.max_abs_ref, p.max_abs_ref);
    t.max_rel = std::max(t.max_rel, p.max_rel);
    t.compared += p.compared, t.n_diff += p.n_diff;
    t.nan_ref += p.nan_ref, t.inf_ref += p.inf_ref, t.nan_cand += p.nan_cand, t.inf_cand += p.inf_cand;
    t.new_nonfinite += p.new_nonfinite;
    if (t.first_new_nonfinite < 0) t.first_new_nonfinite = p.first_new_nonfinite;
  }

  TensorMetrics m;
  m.count = n;
  m.compared = t.compared;
  m.max_abs = t.max_abs;
  m.max_abs_scaled = t.max_abs_scaled;
  m.max_abs_ref = t.max_abs_ref;
  m.max_rel = t.max_rel;
  m.n_diff = t.n_diff;
  m.nan_ref = t.nan_ref, m.inf_ref = t.inf_ref, m.nan_cand = t.nan_cand, m.inf_cand = t.inf_cand;
  m.new_nonfinite = t.new_nonfinite;
  if (t.first_new_nonfinite >= 0) {
    m.first_new_nonfinite = t.first_new_nonfinite;
    m.ref_at_new_nonfinite = ref.value(t.first_new_nonfinite);
    m.cand_at_new_nonfinite = cand.value(t.first_new_nonfinite);
  }
  if (t.compared > 0) {
    m.rmse = std::sqrt(t.dd / static_cast<double>(t.compared));
    m.ref_rms = std::sqrt(t.rr / static_cast<double>(t.compared));
  }
  const double nr = std::sqrt(t.rr), nc = std::sqrt(t.cc), nd = std::sqrt(t.dd);
  if (nr == 0 && nc == 0) m.cosine = 1.0;
  else if (nr == 0 || nc == 0) m.cosine = 0.0;
  else m.cosine = std::clamp(t.rc / (nr * nc), -1.0, 1.0);
  m.rel_l2 = nr > 0 ? nd / nr : (nd == 0 ? 0.0 : std::numeric_limits<double>::infinity());

  // max_abs_scaled: the first pass divided by max(1, |r|), which is the answer when rms(r)
  // <= 1; otherwise a second pass divides by max(rms(r), |r|).
  m.max_abs_scale = std::max(1.0, m.ref_rms);
  if (m.max_abs_scale > 1.0) {
    std::vector<double> scaled(static_cast<std::size_t>(nchunks));
    for_each_chunk(n, [&](std::int64_t k, std::int64_t begin, std::int64_t len, std::vector<double>& buf_r,
                          std::vector<double>& buf_c) {
      const Partial& p = parts[static_cast<std::size_t>(k)];
      const bool finite = p.nan_ref + p.inf_ref + p.nan_cand + p.inf_cand == 0;
      scaled[static_cast<std::size_t>(k)] = chunk_scaled_max(ref, cand, begin, len, m.max_abs_scale, finite, buf_r, buf_c);
    });
    t.max_abs_scaled = 0, worst_scaled_chunk = -1;
    for (std::int64_t k = 0; k < nchunks; ++k)
      if (scaled[static_cast<std::size_t>(k)] > t.max_abs_scaled || worst_scaled_chunk < 0)
        t.max_abs_scaled = scaled[static_cast<std::size_t>(k)], worst_scaled_chunk = k;
    m.max_abs_scaled = t.max_abs_scaled;
  }

  set_err_rel(ref, cand, m);
  m.rel_elem = typical_element_error(ref, cand);

  // The first elements reaching max_abs and max_abs_scaled, found by rescanning only the
  // chunks that hold them.
  if (t.max_abs > 0 && worst_chunk >= 0) {
    const std::int64_t begin = worst_chunk * kChunk, end = std::min(n, begin + kChunk);
    for (std::int64_t i = begin; i < end && m.argmax_abs < 0; ++i) {
      const double a = ref.value(i), b = cand.value(i);
      if (std::isfinite(a) && std::isfinite(b) && std::fabs(b - a) == t.max_abs) m.argmax_abs = i;
    }
  }
  if (t.max_abs_scaled > 0 && worst_scaled_chunk >= 0) {
    const std::int64_t begin = worst_scaled_chunk * kChunk, end = std::min(n, begin + kChunk);
    for (std::int64_t i = begin; i < end && m.argmax_abs_scaled < 0; ++i) {
      const double a = ref.value(i), b = cand.value(i);
      if (std::isfinite(a) && std::isfinite(b) &&
          scaled_abs(std::fabs(b - a), std::fabs(a), m.max_abs_scale) == t.max_abs_scaled)
        m.argmax_abs_scaled = i, m.ref_at_max_abs_scaled = std::fabs(a);
    }
  }
  return m;
}

}  // namespace tdiff
