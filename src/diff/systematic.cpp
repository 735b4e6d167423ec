#include "diff/systematic.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "model/op_table.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tdiff {

namespace {

constexpr std::int64_t kMinSliceElems = 16;  // fewer elements make no fit worth a verdict
constexpr std::size_t kMinFamily = 4;         // a slice is judged against at least 3 others
constexpr std::size_t kExactOthers = 64;      // up to this many slices, the others exclude the slice itself
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMad = 1.4826;
constexpr double kMinSpread = 1e-3;
constexpr double kNormalQ90 = 1.6449;  // the 90th percentile of |z| for a standard normal z  // MAD to the standard deviation of a normal distribution

// The raw moments of one slice that its fit and the fit's robust errors need: r and d = c − r
// up to r⁴ and r²d², so that one pass gives the slope, the offset and their HC errors.
struct Sums {
  double n = 0, r = 0, r2 = 0, r3 = 0, r4 = 0, d = 0, rd = 0, r2d = 0, r3d = 0, d2 = 0, rd2 = 0, r2d2 = 0;

  void add(double x, double y) {
    const double xx = x * x, xy = x * y;
    n += 1, r += x, r2 += xx, r3 += xx * x, r4 += xx * xx;
    d += y, rd += xy, r2d += xx * y, r3d += xx * xy, d2 += y * y, rd2 += xy * y, r2d2 += xy * xy;
  }
  void add(const Sums& o) {
    n += o.n, r += o.r, r2 += o.r2, r3 += o.r3, r4 += o.r4;
    d += o.d, rd += o.rd, r2d += o.r2d, r3d += o.r3d, d2 += o.d2, rd2 += o.rd2, r2d2 += o.r2d2;
  }
};

struct Fit {
  bool valid = false, has_slope = false;
  double slope_dev = 0, slope_se = 0;  // b − 1 and its error
  double offset = 0, offset_se = 0;
  double ref_rms = 0;
};

// Least squares d = a + β·r (β = b − 1) from the moments; HC1 errors: Σ w_i² e_i² · n/(n − 2)
// with e the residuals, expanded in the moments so that no second pass is needed.
Fit fit_of(const Sums& s) {
  Fit f;
  if (s.n < kMinSliceElems) return f;
  f.valid = true;
  const double n = s.n, mr = s.r / n, md = s.d / n;
  const double sxx = s.r2 - n * mr * mr, hc = n / (n - 2);
  f.ref_rms = std::sqrt(s.r2 / n);
  // A slope needs a reference that varies: rms(r − r̄) >= 1e-3 rms(r), which also bounds the
  // cancellation of the raw moments below to a factor 1e6.
  f.has_slope = sxx > kMinSpread * kMinSpread * s.r2 && sxx > 0;
  if (!f.has_slope) {  // a (nearly) constant reference: the offset alone, from the mean difference
    f.offset = md;
    f.offset_se = std::sqrt(std::max(0.0, s.d2 - n * md * md) / (n * (n - 1)));
    return f;
  }
  const double b = (s.rd - mr * s.d) / sxx, a = md - b * mr;
  // Σ e², Σ r e², Σ r² e² for e = d − a − b·r.
  const double e2 = s.d2 - 2 * a * s.d - 2 * b * s.rd + n * a * a + 2 * a * b * s.r + b * b * s.r2;
  const double re2 = s.rd2 - 2 * a * s.rd - 2 * b * s.r2d + a * a * s.r + 2 * a * b * s.r2 + b * b * s.r3;
  const double r2e2 = s.r2d2 - 2 * a * s.r2d - 2 * b * s.r3d + a * a * s.r2 + 2 * a * b * s.r3 + b * b * s.r4;
  const double cxe2 = re2 - mr * e2;                          // Σ (r − r̄) e²
  const double cxxe2 = std::max(0.0, r2e2 - 2 * mr * re2 + mr * mr * e2);  // Σ (r − r̄)² e²
  f.slope_dev = b;
  f.slope_se = std::sqrt(hc * cxxe2) / sxx;
  if (!(f.slope_se > 0) && e2 > 0) f.slope_se = std::sqrt(e2 / (n - 2) / sxx);  // HC lost to rounding: plain OLS
  f.offset = a;
  const double va = e2 / (n * n) - 2 * mr * cxe2 / (n * sxx) + mr * mr * cxxe2 / (sxx * sxx);
  f.offset_se = std::sqrt(std::max(0.0, hc * va));
  return f;
}

// Per-row and per-column moments of [rows, F], one pass. Blocks of rows are summed on all
// threads, each block's column sums into its own slot, and the slots are added in block order
// (a wave of blocks at a time, to bound memory), so the result is the same for any thread count.
struct Pass {
  std::vector<Sums> rows, cols;
};

Pass accumulate(const Tensor& ref, const Tensor& cand, std::int64_t T, std::int64_t F) {
  const Tensor r2 = ref.reshaped({T, F}), c2 = cand.reshaped({T, F});
  const std::int64_t block = std::max<std::int64_t>(64, (std::int64_t{1} << 16) / F);
  const std::int64_t nblocks = (T + block - 1) / block;
  std::int64_t wave = 1;
#ifdef _OPENMP
  wave = std::max(1, omp_get_max_threads());
#endif
  Pass p;
  p.rows.assign(static_cast<std::size_t>(T), {});
  p.cols.assign(static_cast<std::size_t>(F), {});
  std::vector<std::vector<Sums>> part(static_cast<std::size_t>(wave));
  for (std::int64_t b0 = 0; b0 < nblocks; b0 += wave) {
    const std::int64_t nb = std::min(wave, nblocks - b0);
#pragma omp parallel for schedule(static)
    for (std::int64_t k = 0; k < nb; ++k) {
      std::vector<Sums>& cols = part[static_cast<std::size_t>(k)];
      cols.assign(static_cast<std::size_t>(F), {});
      std::vector<double> br(static_cast<std::size_t>(F)), bc(static_cast<std::size_t>(F));
      const std::int64_t t0 = (b0 + k) * block, t1 = std::min(T, t0 + block);
      for (std::int64_t t = t0; t < t1; ++t) {
        r2.rows(t, t + 1).to_f64(br.data());
        c2.rows(t, t + 1).to_f64(bc.data());
        Sums row;
        for (std::int64_t f = 0; f < F; ++f) {
          const double x = br[static_cast<std::size_t>(f)], y = bc[static_cast<std::size_t>(f)] - x;
          if (!std::isfinite(x) || !std::isfinite(y)) continue;  // counted and judged by the metrics
          row.add(x, y);
          cols[static_cast<std::size_t>(f)].add(x, y);
        }
        p.rows[static_cast<std::size_t>(t)] = row;
      }
    }
    for (std::int64_t k = 0; k < nb; ++k)
      for (std::int64_t f = 0; f < F; ++f) p.cols[static_cast<std::size_t>(f)].add(part[static_cast<std::size_t>(k)][static_cast<std::size_t>(f)]);
  }
  return p;
}

// How the slices of a family are cut from [rows, features].
enum class Cut { rows, columns, axis, groups };

struct Family {
  Cut cut;
  std::size_t axis = 0;  // Cut::axis: which feature axis
  std::string name;      // "token", "head", "ch", "expert"
  std::vector<Sums> sums;
};

std::int64_t feature_count(const SliceLayout& l) {
  std::int64_t F = 1;
  for (const auto& a : l.features) F *= a.size;
  return F;
}

// Index of feature `f` on axis `a`.
std::int64_t coord(const SliceLayout& l, std::int64_t f, std::size_t a) {
  for (std::size_t k = l.features.size(); k-- > a + 1;) f /= l.features[k].size;
  return f % l.features[a].size;
}

std::vector<Family> families(const SliceLayout& l, const Pass& p) {
  std::vector<Family> fams;
  const std::int64_t F = feature_count(l);
  if (F >= kMinSliceElems) fams.push_back({Cut::rows, 0, l.unit, p.rows});
  if (l.rows >= kMinSliceElems && !l.features.empty()) fams.push_back({Cut::columns, 0, l.features.back().name, p.cols});
  for (std::size_t a = 0; a + 1 < l.features.size(); ++a) {
    Family fam{Cut::axis, a, l.features[a].name, std::vector<Sums>(static_cast<std::size_t>(l.features[a].size))};
    for (std::int64_t f = 0; f < F; ++f) fam.sums[static_cast<std::size_t>(coord(l, f, a))].add(p.cols[static_cast<std::size_t>(f)]);
    fams.push_back(std::move(fam));
  }
  if (l.groups.defined() && l.n_groups > 0) {
    Family fam{Cut::groups, 0, "expert", std::vector<Sums>(static_cast<std::size_t>(l.n_groups))};
    const std::int64_t K = l.groups.numel() / std::max<std::int64_t>(1, l.rows);
    for (std::int64_t t = 0; t < l.rows; ++t)
      for (std::int64_t k = 0; k < K; ++k) {
        const auto e = static_cast<std::int64_t>(l.groups.value(t * K + k));
        bool again = false;  // a token counts once per expert
        for (std::int64_t j = 0; j < k; ++j) again = again || static_cast<std::int64_t>(l.groups.value(t * K + j)) == e;
        if (e >= 0 && e < l.n_groups && !again) fam.sums[static_cast<std::size_t>(e)].add(p.rows[static_cast<std::size_t>(t)]);
      }
    fams.push_back(std::move(fam));
  }
  return fams;
}

std::string slice_name(const SliceLayout& l, const Family& fam, std::int64_t i) {
  switch (fam.cut) {
    case Cut::rows:
      if (l.real_rows) return fmt::format("real {} {}", l.unit, i);
      if (l.seq > 0) return fmt::format("row {}, {} {}", i / l.seq, l.unit, i % l.seq);
      return fmt::format("{} {}", l.unit, i);
    case Cut::columns: {
      std::string s;
      for (std::size_t a = 0; a < l.features.size(); ++a)
        s += fmt::format("{}{} {}", a ? ", " : "", l.features[a].name, coord(l, i, a));
      return s;
    }
    case Cut::axis: return fmt::format("{} {}", fam.name, i);
    case Cut::groups: return fmt::format("expert {} (its tokens)", i);
  }
  return "";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  const double hi = *mid;
  if (v.size() % 2) return hi;
  return 0.5 * (hi + *std::max_element(v.begin(), mid));
}

// Median and spread of a statistic over a family's slices other than `skip` (-1: all of them).
struct Others {
  double center = 0, spread = 0;
};
Others others(const std::vector<double>& s, const std::vector<double>& se, std::ptrdiff_t skip) {
  std::vector<double> v, e;
  for (std::size_t j = 0; j < s.size(); ++j)
    if (static_cast<std::ptrdiff_t>(j) != skip) v.push_back(s[j]), e.push_back(se[j]);
  Others o;
  o.center = median(v);
  for (auto& x : v) x = std::abs(x - o.center);
  // The spread of an unbiased statistic is never below its own sampling noise; and the errors
  // of ill-conditioned slices (a sharp attention row, whose largest weight's rounding scales
  // the whole row) have heavier tails than a normal distribution, which the 90th percentile
  // of the deviations sees and the MAD does not.
  std::sort(v.begin(), v.end());
  const double q90 = v.empty() ? 0.0 : v[static_cast<std::size_t>(0.9 * static_cast<double>(v.size() - 1))];
  o.spread = std::max({kMad * median(v), q90 / kNormalQ90, median(e)});
  return o;
}

double ratio(double num, double den) { return num == 0 ? 0.0 : den > 0 ? num / den : kInf; }

// The strongest slice of one family for one statistic, or nothing when too few slices fit.
std::optional<SliceFinding> strongest(const SliceLayout& l, const Family& fam, const std::vector<Fit>& fits, SliceFault fault) {
  std::vector<double> s, se;
  std::vector<std::int64_t> at;
  for (std::size_t i = 0; i < fits.size(); ++i) {
    const Fit& f = fits[i];
    if (!f.valid || (fault == SliceFault::scale && !f.has_slope)) continue;
    s.push_back(fault == SliceFault::scale ? f.slope_dev : f.offset);
    se.push_back(fault == SliceFault::scale ? f.slope_se : f.offset_se);
    at.push_back(static_cast<std::int64_t>(i));
  }
  if (s.size() < kMinFamily) return std::nullopt;
  const bool exact = s.size() <= kExactOthers;
  const Others all = exact ? Others{} : others(s, se, -1);
  std::optional<SliceFinding> best;
  for (std::size_t j = 0; j < s.size(); ++j) {
    const Others o = exact ? others(s, se, static_cast<std::ptrdiff_t>(j)) : all;
    SliceFinding f;
    f.z_own = ratio(std::abs(s[j]), se[j]);
    f.z_spread = ratio(std::abs(s[j] - o.center), o.spread);
    if (best && f.score() <= best->score()) continue;
    const Fit& fit = fits[static_cast<std::size_t>(at[j])];
    f.family = fam.name;
    f.rows = fam.cut == Cut::rows;
    f.slice = slice_name(l, fam, at[j]);
    f.fault = fault;
    f.value = fault == SliceFault::scale ? 1.0 + s[j] : s[j];
    f.se = se[j];
    f.typical = fault == SliceFault::scale ? 1.0 + o.center : o.center;
    f.spread = o.spread;
    f.ref_rms = fit.ref_rms;
    best = f;
  }
  return best;
}

// The flat indices of slice `i` of a family, in an order that aligns the slices of one family
// element for element (same row, same other coordinates).
std::vector<std::int64_t> slice_elements(const SliceLayout& l, const Family& fam, std::int64_t i) {
  const std::int64_t F = feature_count(l);
  std::vector<std::int64_t> at;
  for (std::int64_t t = 0; t < l.rows; ++t)
    for (std::int64_t f = 0; f < F; ++f) {
      const bool in = fam.cut == Cut::rows ? t == i : fam.cut == Cut::columns ? f == i : coord(l, f, fam.axis) == i;
      if (in) at.push_back(t * F + f);
    }
  return at;
}

// |c_i − r_j| / |r_j| over the aligned elements of two slices: 0 when slice i holds j's reference.
double misplaced(const Tensor& ref, const Tensor& cand, const std::vector<std::int64_t>& ci,
                 const std::vector<std::int64_t>& rj) {
  double dd = 0, rr = 0;
  for (std::size_t k = 0; k < ci.size(); ++k) {
    const double r = ref.value(rj[k]), d = cand.value(ci[k]) - r;
    dd += d * d, rr += r * r;
  }
  return rr > 0 ? std::sqrt(dd / rr) : kInf;
}

constexpr double kSwapMatch = 0.1;   // each slice holds the other's reference to 10%
constexpr double kSwapSlope = 0.9;   // a slope this far below 1: the slice may not hold its own values
constexpr std::size_t kSwapCandidates = 8;

// Two slices of a family that traded places: each fits its own reference badly (slope < 0.5)
// and holds the other's.
std::optional<SliceFinding> swapped(const SliceLayout& l, const Family& fam, const std::vector<Fit>& fits,
                                    const Tensor& ref, const Tensor& cand) {
  if (fam.cut == Cut::groups) return std::nullopt;  // an expert's tokens do not align with another's
  std::vector<std::int64_t> cand_slices;
  for (std::size_t i = 0; i < fits.size() && cand_slices.size() < kSwapCandidates; ++i)
    if (fits[i].valid && fits[i].has_slope && fits[i].slope_dev < kSwapSlope - 1.0) cand_slices.push_back(static_cast<std::int64_t>(i));
  for (std::size_t x = 0; x < cand_slices.size(); ++x)
    for (std::size_t y = x + 1; y < cand_slices.size(); ++y) {
      const std::int64_t i = cand_slices[x], j = cand_slices[y];
      const auto ei = slice_elements(l, fam, i), ej = slice_elements(l, fam, j);
      if (ei.size() != ej.size()) continue;
      const double match = std::max(misplaced(ref, cand, ei, ej), misplaced(ref, cand, ej, ei));
      if (!(match < kSwapMatch)) continue;
      const Fit &fi = fits[static_cast<std::size_t>(i)], &fj = fits[static_cast<std::size_t>(j)];
      std::vector<double> s, se;
      for (std::size_t k = 0; k < fits.size(); ++k)
        if (fits[k].valid && fits[k].has_slope && static_cast<std::int64_t>(k) != i && static_cast<std::int64_t>(k) != j)
          s.push_back(fits[k].slope_dev), se.push_back(fits[k].slope_se);
      if (s.size() + 2 < kMinFamily) return std::nullopt;
      const Others o = others(s, se, -1);
      SliceFinding f;
      f.family = fam.name;
      f.rows = fam.cut == Cut::rows;
      f.slice = slice_name(l, fam, i);
      f.partner = slice_name(l, fam, j);
      f.fault = SliceFault::swap;
      f.value = 1.0 + fi.slope_dev, f.partner_value = 1.0 + fj.slope_dev;
      f.se = std::max(fi.slope_se, fj.slope_se);
      f.typical = 1.0 + o.center, f.spread = o.spread;
      f.ref_rms = fi.ref_rms;
      // The pair stands out as much as the more distinct of its two slices.
      const double own_i = ratio(std::abs(fi.slope_dev), fi.slope_se), own_j = ratio(std::abs(fj.slope_dev), fj.slope_se);
      const double spread_i = ratio(std::abs(fi.slope_dev - o.center), o.spread);
      const double spread_j = ratio(std::abs(fj.slope_dev - o.center), o.spread);
      const bool by_i = std::min(own_i, spread_i) >= std::min(own_j, spread_j);
      f.z_own = by_i ? own_i : own_j;
      f.z_spread = by_i ? spread_i : spread_j;
      f.swap_match = match;
      return f;
    }
  return std::nullopt;
}

// How a report names an index on a contract axis.
std::string axis_display(const std::string& contract_name, bool last) {
  if (contract_name == "H" || contract_name == "H_I") return "head";
  if (contract_name == "n_hc") return "stream";
  if (contract_name == "E") return "expert";
  if (contract_name == "K") return "slot";
  if (contract_name == "V") return "id";
  if (last && contract_name == "S") return "key";
  if (last && contract_name == "n") return "entry";
  return "ch";
}

}  // namespace

std::optional<SliceLayout> slice_layout(const TensorSpec& spec, const Shape& compared, std::int64_t seq) {
  const RowLayout rl = op_info(spec.kind).layout;
  const std::size_t leading = rl == RowLayout::flat_tokens ? 1 : 2;
  if (spec.axes.size() < leading || compared.empty()) return std::nullopt;
  SliceLayout l;
  l.unit = rl == RowLayout::entries || spec.axes[1].name == "n" ? "entry"
           : rl == RowLayout::query_key || rl == RowLayout::query_entry ? "query"
                                                                         : "token";
  if (leading == 1) l.unit = "token";
  std::int64_t F = 1;
  for (std::size_t a = leading; a < spec.axes.size(); ++a) {
    l.features.push_back({axis_display(spec.axes[a].name, a + 1 == spec.axes.size()), spec.axes[a].size});
    F *= spec.axes[a].size;
  }
  // The compared tensor ends in the spec's trailing axes: [B,S,...], [N,...] or a dump's [R,...].
  if (compared.size() < l.features.size() + 1 || F <= 0) return std::nullopt;
  for (std::size_t k = 0; k < l.features.size(); ++k)
    if (compared[compared.size() - l.features.size() + k] != l.features[k].size) return std::nullopt;
  l.rows = shape_numel(compared) / F;
  if (compared != spec.shape()) l.real_rows = true;
  else l.seq = leading == 2 ? spec.axes[1].size : seq;
  return l;
}

SystematicFit fit_slices(const std::string& key, const Tensor& ref, const Tensor& cand, const SliceLayout& layout) {
  SystematicFit out;
  out.key = key;
  const std::int64_t F = feature_count(layout);
  if (F <= 0 || layout.rows <= 0 || ref.numel() != layout.rows * F || cand.numel() != ref.numel()) return out;
  const Pass p = accumulate(ref, cand, layout.rows, F);
  for (const Family& fam : families(layout, p)) {
    std::vector<Fit> fits;
    for (const auto& s : fam.sums) fits.push_back(fit_of(s));
    out.slices += static_cast<std::int64_t>(fits.size());
    for (SliceFault fault : {SliceFault::scale, SliceFault::offset})
      if (auto f = strongest(layout, fam, fits, fault)) out.findings.push_back(std::move(*f));
    if (auto f = swapped(layout, fam, fits, ref, cand)) out.findings.push_back(std::move(*f));
  }
  // Strongest first; a swap before the scales it explains.
  std::stable_sort(out.findings.begin(), out.findings.end(), [](const SliceFinding& a, const SliceFinding& b) {
    const bool sa = a.fault == SliceFault::swap, sb = b.fault == SliceFault::swap;
    return sa != sb ? sa : a.score() > b.score();
  });
  return out;
}

bool finding_fires(const SliceFinding& f, double threshold, double unit) {
  if (threshold == 0.0 || !(f.score() > threshold)) return false;
  switch (f.fault) {
    case SliceFault::scale: return std::abs(f.value - 1.0) > unit;
    case SliceFault::offset: return std::abs(f.value) > unit * f.ref_rms;
    case SliceFault::swap: return true;
  }
  return false;
}

const char* slice_fault_name(SliceFault f) {
  switch (f) {
    case SliceFault::scale: return "scale";
    case SliceFault::offset: return "offset";
    case SliceFault::swap: return "swap";
  }
  return "?";
}

namespace {
std::string sigmas(double z) { return std::isinf(z) ? "exact" : fmt::format("{:.0f}σ", z); }
}  // namespace

std::string finding_text(const SystematicFit& fit, const SliceFinding& f) {
  switch (f.fault) {
    case SliceFault::scale:
      return fmt::format("{} of {} scaled by {:.4f} (slope {:.4f} ± {:.2g} = {}; the other {}s {:.4f} ± {:.2g})", f.slice,
                         fit.key, f.value, f.value, f.se, sigmas(f.z_own), f.family, f.typical, f.spread);
    case SliceFault::offset:
      return fmt::format("{} of {} offset by {:+.3g} ({:.2g} of its rms {:.3g}; ± {:.2g} = {}; the other {}s {:+.2g} ± {:.2g})",
                         f.slice, fit.key, f.value, f.ref_rms > 0 ? std::abs(f.value) / f.ref_rms : kInf, f.ref_rms,
                         f.se, sigmas(f.z_own), f.family, f.typical, f.spread);
    case SliceFault::swap:
      return fmt::format("{} and {} of {} swapped (slopes {:.3f} and {:.3f} on their own references, each within {:.2g} of "
                         "the other's; the other {}s {:.4f} ± {:.2g})",
                         f.slice, f.partner, fit.key, f.value, f.partner_value, f.swap_match, f.family, f.typical, f.spread);
  }
  return "";
}

}  // namespace tdiff
