#pragma once
// Systematic error: what rounding cannot produce. Rounding errors are unbiased and alike across
// the slices of a tensor (its heads, streams, channels, tokens, the tokens of one expert); a
// scaled head, a bias on one channel, two swapped heads or a shifted token row is one slice
// standing out. Per slice, the candidate is fitted against the reference by least squares in
// float64,
//   c = a + b·r      (d = c − r = a + (b − 1)·r; slope b, offset a)
// with heteroscedasticity-robust (HC1) standard errors from the slice's own residuals, since
// rounding errors scale with |r|. A slice's statistic s (b − 1, or a) stands out when it is
// far from 0 against its own standard error AND far from the same statistic of the family's
// other slices against their spread:
//   z_own    = |s_i| / se_i
//   z_spread = |s_i − median_j s_j| / max(1.4826·MAD_j s_j, median_j se_j)     (j ≠ i)
//   score    = min(z_own, z_spread)
// The threshold key `systematic` (thresholds.h) FAILs a tensor whose strongest slice scores
// above it. Both statistics are in units of the candidate's own noise, so the rule scales
// with its formats (docs/design/tolerance-model.md, "Systematic errors").
//
// One pass over the pair, parallel over fixed blocks of rows whose partial sums are combined
// in block order: bit-identical for any OpenMP thread count.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "model/tensor_contract.h"

namespace tdiff {

struct SliceAxis {
  std::string name;  // how a report names an index on it: "head", "stream", "ch", "expert"
  std::int64_t size = 0;
};

// A stage output seen as [rows, features]: rows are its tokens (or compressed entries, or
// queries), features the trailing axes of its contract.
struct SliceLayout {
  std::string unit = "token";      // what a row is: "token", "entry", "query"
  std::vector<SliceAxis> features;  // outermost first
  std::int64_t rows = 0;
  std::int64_t seq = 0;  // rows per batch row, to name "row b, token s"; 0: the rows are numbered flat
  bool real_rows = false;  // the rows are a dump's real tokens only ("real token i")
  // [rows, K] ids: the expert each row's token was routed to in the reference (moe.experts),
  // which makes the "expert" slices (the tokens of one expert); undefined: none.
  Tensor groups;
  std::int64_t n_groups = 0;
};

// The layout of `spec`'s tensor as compared (`compared`: its shape, a dump's real rows
// [R, trailing...] included; `seq`: the case's tokens per batch row); nullopt when the shape
// does not end in the spec's trailing axes.
std::optional<SliceLayout> slice_layout(const TensorSpec& spec, const Shape& compared, std::int64_t seq);

enum class SliceFault : std::uint8_t { scale, offset, swap };

struct SliceFinding {
  std::string family;  // "head", "stream", "ch", "token", "expert", ...
  bool rows = false;   // the family of the tensor's rows (a token's, an entry's, a query's)
  std::string slice;   // "head 1", "row 0, token 13", "head 1, ch 28"
  SliceFault fault = SliceFault::scale;
  double value = 0.0;   // the slope b (scale, swap) or the offset a
  double se = 0.0;      // its standard error
  double typical = 0.0, spread = 0.0;  // the statistic over the family's other slices: median, spread
  double ref_rms = 0.0;                // rms of the slice's reference (what an offset is read against)
  double z_own = 0.0, z_spread = 0.0;
  std::string partner;        // swap: the slice it traded places with
  double partner_value = 0.0;  // swap: the partner's slope
  double swap_match = 0.0;    // swap: |c_i − r_j| / |r_j|, the worse of the two
  double score() const { return z_own < z_spread ? z_own : z_spread; }
};

struct SystematicFit {
  std::string key;              // "<stage>/<tensor>", for the findings' text
  std::int64_t slices = 0;      // slices fitted, over every family
  std::vector<SliceFinding> findings;  // the strongest of each family and statistic: swaps first, then by score
  double unit = 0.0;  // the unit roundoff of the candidate's output format (set by judge(): finding_fires)
  // The rows' family (a token's, an entry's or a query's row): the deviation the reference's conditioning
  // explains there (set by judge() where the case stores one; 0: none).
  double row_unit = 0.0;
  // An offset of the other families: the tensor's expected relative error (0: none).
  double offset_unit = 0.0;
  double unit_for(const SliceFinding& f) const {
    if (f.rows) return row_unit > unit ? row_unit : unit;
    return f.fault == SliceFault::offset && offset_unit > unit ? offset_unit : unit;
  }
  double score() const {  // the strongest finding's
    double s = 0.0;
    for (const auto& f : findings) s = f.score() > s ? f.score() : s;
    return s;
  }
};

// Fits every slice of every family of `layout` ([rows, features] of ref and cand, same shape).
SystematicFit fit_slices(const std::string& key, const Tensor& ref, const Tensor& cand, const SliceLayout& layout);

// Whether a finding FAILs: its score above `threshold` (the `systematic` key; 0: never) and
// its size beyond what one rounding in the candidate's output format can do to every element
// of a slice alike (`unit`: that format's unit roundoff u; a scale |b − 1| > u, an offset
// |a| > u·rms(r) of the slice). Identical values round identically, so a nearly constant
// slice can carry a rounding bias of up to u that no standard error sees.
bool finding_fires(const SliceFinding& f, double threshold, double unit);

// "head 1 of L02.attn.core/o scaled by 1.0050 (slope 1.0050 ± 0.0002 = 25σ; the other heads 1.0000 ± 0.0001)"
std::string finding_text(const SystematicFit& fit, const SliceFinding& f);
const char* slice_fault_name(SliceFault f);  // "scale", "offset", "swap"

}  // namespace tdiff
