#include "diff/location.h"

#include <fmt/format.h>

#include "model/op_table.h"
#include "model/stage_names.h"

namespace tdiff {

namespace {

using Names = std::vector<std::string>;

// The trailing dimensions of a per-token tensor [B, S, ...].
Names token_tail(const OpInfo& op, std::size_t rank) {
  const bool hc = op.family == OpFamily::hyper_connection;
  if (rank == 3) {
    if (op.kind == OpKind::hc_sinkhorn || op.kind == OpKind::hc_head) return {"stream"};
    return {op.kind == OpKind::idx_weights ? "head" : "ch"};
  }
  if (rank == 4) {
    if (hc) return {"stream", op.kind == OpKind::hc_sinkhorn ? "stream" : "ch"};
    return {op.kind == OpKind::grouped_linear ? "group" : "head", "ch"};
  }
  return {};
}

// Dimension names of the stage's tensors by layout (op_table.h), outermost first; empty when
// the rank does not fit the layout.
Names dim_names(const OpInfo& op, std::size_t rank) {
  Names n;
  switch (op.layout) {
    case RowLayout::tokens: n = {"row", "token"}; break;
    case RowLayout::flat_tokens:
      n = {"token", op.kind == OpKind::router ? "expert" : op.output == TensorKind::routing || op.kind == OpKind::moe_weights
                                                            ? "slot"
                                                            : "ch"};
      return rank == 2 ? n : Names{};
    case RowLayout::entries: n = {"row", "entry", "ch"}; return rank == 3 ? n : Names{};
    case RowLayout::query_key: n = {"row", "query", "key"}; return rank == 3 ? n : Names{};
    case RowLayout::query_entry: n = {"row", "query", "entry"}; return rank == 3 ? n : Names{};
    case RowLayout::selected_ids: n = {"row", "token", "slot"}; return rank == 3 ? n : Names{};
  }
  if (rank == 2) return n;
  const Names tail = token_tail(op, rank);
  if (tail.empty()) return {};
  n.insert(n.end(), tail.begin(), tail.end());
  return n;
}

}  // namespace

std::vector<std::pair<std::string, std::int64_t>> element_location(const std::string& stage, const Shape& shape,
                                                                   std::int64_t flat, std::int64_t seq) {
  std::vector<std::pair<std::string, std::int64_t>> loc;
  if (flat < 0 || flat >= shape_numel(shape)) return loc;
  const auto name = parse_stage_name(stage);
  Names names = name ? dim_names(op_info(name->kind), shape.size()) : Names{};
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::string n = names.empty() ? fmt::format("dim{}", d) : names[d];
    if (n == "token" && d == 0 && seq > 0) {  // a flattened [B*S] token: row and token
      loc.emplace_back("row", idx[d] / seq);
      loc.emplace_back("token", idx[d] % seq);
    } else {
      loc.emplace_back(n, idx[d]);
    }
  }
  return loc;
}

std::string location_text(const std::string& stage, const Shape& shape, std::int64_t flat, std::int64_t seq) {
  std::string s;
  for (const auto& [n, i] : element_location(stage, shape, flat, seq)) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, i);
  return s;
}

}  // namespace tdiff
