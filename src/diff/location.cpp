#include "diff/location.h"

#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "diff/compare.h"
#include "diff/divergence.h"
#include "diff/real_rows.h"
#include "model/op_table.h"
#include "model/tensor_contract.h"

namespace tdiff {

namespace {

std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

Location plain(const Shape& shape, std::int64_t flat) {
  Location at;
  const auto idx = unravel(flat, shape);
  for (std::size_t d = 0; d < idx.size(); ++d) at.emplace_back(fmt::format("dim{}", d), idx[d]);
  return at;
}

// What a contract axis is called in a location; "" for the axes split in two (N, G*R_o, 2d).
std::string axis_word(const TensorSpec& spec, std::size_t i) {
  const std::string& a = spec.axes[i].name;
  const RowLayout layout = op_info(spec.kind).layout;
  if (a == "B") return "row";
  if (a == "S") {
    if (layout != RowLayout::query_key && layout != RowLayout::query_entry) return "token";
    return i == 1 ? "query" : "key";
  }
  if (a == "n") return "entry";
  if (a == "k" || a == "K") return "slot";
  if (a == "E") return "expert";
  if (a == "H" || a == "H_I") return "head";
  if (a == "V") return "vocab";
  // Sinkhorn's comb [n_hc, n_hc]: hc_post mixes stream a into stream k by comb[a][k].
  if (a == "n_hc" && i + 1 < spec.axes.size() && spec.axes[i + 1].name == "n_hc") return "from stream";
  if (a == "n_hc" && i > 0 && spec.axes[i - 1].name == "n_hc") return "to stream";
  if (a == "n_hc") return "stream";
  return "ch";
}

}  // namespace

Locator::Locator(const std::vector<Stage>& stages, const ModelConfig& config, const Batch& batch,
                 std::shared_ptr<const DivergedTokens> divergence)
    : contract_(std::make_shared<const TensorContract>(stages, config, batch.rows(), batch.seq())),
      batch_(batch),
      divergence_(std::move(divergence)),
      o_groups_(config.o_groups) {
  for (const auto& s : stages) rate_[s.name] = real_rows_rate(s, config);
}

std::optional<std::int64_t> Locator::in_full_layout(const TensorSpec& spec, const Shape& compared,
                                                    std::int64_t flat) const {
  const Shape full = spec.shape();
  if (squeezed(compared) == squeezed(full)) return flat;
  // Judged on some rows only (a dump's real rows, less a free run's diverged tokens): the n-th
  // row compared is the n-th row kept.
  const auto rate = rate_.find(spec.stage);
  std::vector<RealRows> kept_rows = {real_rows(full, batch_, rate == rate_.end() ? 0 : rate->second)};
  if (divergence_) {
    kept_rows.push_back(divergence_->layout(spec.stage, full));
    for (auto& rows : kept_rows) divergence_->exclude(spec.stage, full, rows);
  }
  for (const RealRows& rows : kept_rows) {
    Shape kept = {rows.count()};
    kept.insert(kept.end(), rows.inner.begin(), rows.inner.end());
    if (squeezed(compared) != squeezed(kept) || rows.row_size == 0) continue;
    std::int64_t row = -1;
    for (std::int64_t r = 0, n = flat / rows.row_size; r < rows.rows; ++r)
      if (rows.real[static_cast<std::size_t>(r)] && n-- == 0) row = r;
    return row * rows.row_size + flat % rows.row_size;
  }
  return std::nullopt;
}

std::int64_t Locator::original_index(const std::string& key, const Shape& compared, std::int64_t flat) const {
  if (flat < 0 || flat >= shape_numel(compared)) return -1;
  const TensorSpec* spec = contract_ ? contract_->find(key) : nullptr;
  return spec ? in_full_layout(*spec, compared, flat).value_or(flat) : flat;
}

Location Locator::locate(const std::string& key, const Shape& compared, std::int64_t flat) const {
  if (flat < 0 || flat >= shape_numel(compared)) return {};
  const TensorSpec* spec = contract_ ? contract_->find(key) : nullptr;
  // No stage output of this name, or a shape that is neither the full layout nor its real rows.
  const std::optional<std::int64_t> original = spec ? in_full_layout(*spec, compared, flat) : std::nullopt;
  if (!original) return plain(compared, flat);
  flat = *original;
  const Shape full = spec->shape();
  Location at;
  const auto idx = unravel(flat, full);
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const Axis& a = spec->axes[i];
    if (a.name == "N") {
      at.emplace_back("row", idx[i] / batch_.seq());
      at.emplace_back("token", idx[i] % batch_.seq());
    } else if (a.name == "G*R_o" && o_groups_ > 0) {
      const std::int64_t width = a.size / o_groups_;
      at.emplace_back("group", idx[i] / width);
      at.emplace_back("ch", idx[i] % width);
    } else if (a.name.starts_with("2")) {  // CSA's two overlapping windows side by side
      at.emplace_back("window", idx[i] / (a.size / 2));
      at.emplace_back("ch", idx[i] % (a.size / 2));
    } else {
      at.emplace_back(axis_word(*spec, i), idx[i]);
    }
  }
  return at;
}

Location locate(const Locator* locator, const std::string& key, const Shape& compared, std::int64_t flat) {
  return locator ? locator->locate(key, compared, flat) : Locator().locate(key, compared, flat);
}

std::string location_text(const Location& at) {
  std::string s;
  for (const auto& [n, i] : at) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, i);
  return s;
}

PointedElement pointed_element(const TensorDiff& d) {
  PointedElement e;
  if (d.shape_cand) return e;
  const TensorMetrics& m = d.metrics;
  if (d.kind == TensorKind::routing) {
    if (!d.routing || d.routing->k == 0) return e;
    const RoutingMetrics& r = *d.routing;
    const std::int64_t token = (r.replayed || r.own_path) && r.first_unexplained >= 0 ? r.first_unexplained : r.first_mismatch;
    if (token >= 0) e = {Pointed::other_selection, token * r.k, true, false, 0, 0};
    return e;
  }
  if (m.first_new_nonfinite >= 0)
    return {std::isnan(m.cand_at_new_nonfinite) ? Pointed::new_nan : Pointed::new_inf,
            m.first_new_nonfinite,
            false,
            true,
            m.ref_at_new_nonfinite,
            m.cand_at_new_nonfinite};
  if (m.argmax_err_rel < 0 || m.err_rel == 0) return e;
  return {d.kind == TensorKind::exact ? Pointed::differs : Pointed::largest_error,
          m.argmax_err_rel,
          false,
          true,
          m.ref_at_err,
          m.cand_at_err};
}

const char* pointed_name(Pointed p) {
  switch (p) {
    case Pointed::none:
      return "";
    case Pointed::new_nan:
      return "new NaN";
    case Pointed::new_inf:
      return "new Inf";
    case Pointed::largest_error:
      return "largest error";
    case Pointed::other_selection:
      return "other selection";
    case Pointed::differs:
      return "differs";
  }
  return "";
}

Location locate_pointed(const Locator* locator, const TensorDiff& d, const PointedElement& e) {
  if (e.what == Pointed::none) return {};
  Location at = locate(locator, d.key(), d.shape, e.flat);
  if (e.whole_row && !at.empty()) at.pop_back();
  return at;
}

}  // namespace tdiff
