#include "exec/row_slice.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace tdiff {

namespace {

using Range = std::array<std::int64_t, 2>;  // [begin, end)

// The block of `t` given by ranges over its leading dimensions (the others whole).
Tensor sub_block(const Tensor& t, const std::vector<Range>& ranges) {
  Shape shape = t.shape();
  const std::size_t lead = ranges.size();
  for (std::size_t i = 0; i < lead; ++i) shape[i] = ranges[i][1] - ranges[i][0];
  Tensor out(t.dtype(), shape);
  std::vector<std::int64_t> stride(lead);
  std::int64_t inner = 1;
  for (std::size_t i = lead; i < t.shape().size(); ++i) inner *= t.shape()[i];
  for (std::size_t i = lead; i-- > 0;) stride[i] = i + 1 == lead ? inner : stride[i + 1] * t.shape()[i + 1];
  const std::size_t bytes = static_cast<std::size_t>(inner) * dtype_size(t.dtype());
  const std::int64_t blocks = out.numel() / std::max<std::int64_t>(inner, 1);
  if (inner == 0) return out;
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::int64_t rest = b, src = 0;
    for (std::size_t i = lead; i-- > 0;) {
      const std::int64_t idx = rest % shape[i];
      rest /= shape[i];
      src += (ranges[i][0] + idx) * stride[i];
    }
    std::memcpy(out.raw() + static_cast<std::size_t>(b) * bytes, t.raw() + static_cast<std::size_t>(src) * dtype_size(t.dtype()),
                bytes);
  }
  return out;
}

// The selected entry ids of the row's real queries, sorted and padded with -1 to index_topk.
Tensor selected_ids(const Tensor& t, const Range& r, const Range& tokens, const ModelConfig& c) {
  const Tensor sel = sub_block(t, {r, tokens});
  const std::int64_t len = tokens[1] - tokens[0], k = sel.dim(2), width = c.index_topk;
  Tensor out(DType::i64, {1, len, width});
  const auto* in = sel.data<std::int64_t>();
  auto* o = out.data<std::int64_t>();
  for (std::int64_t i = 0; i < len; ++i) {
    std::vector<std::int64_t> ids;
    for (std::int64_t j = 0; j < k; ++j)
      if (in[i * k + j] >= 0) ids.push_back(in[i * k + j]);
    std::sort(ids.begin(), ids.end());
    ids.resize(static_cast<std::size_t>(width), -1);
    std::copy(ids.begin(), ids.end(), o + i * width);
  }
  return out;
}

}  // namespace

Tensor row_slice(const Stage& s, const Tensor& t, const Batch& batch, std::int64_t row, const ModelConfig& c) {
  const std::int64_t B = batch.rows(), S = batch.seq();
  const std::int64_t st = batch.start[static_cast<std::size_t>(row)], len = batch.length[static_cast<std::size_t>(row)];
  const Range r{row, row + 1}, tokens{st, st + len};
  const std::int64_t rate = s.rate > 0 ? s.rate : c.rate(s.layer_type);
  const std::int64_t entries = rate > 0 ? len / rate : 0;
  const RowLayout layout = op_info(s.kind).layout;
  if (layout == RowLayout::flat_tokens && t.rank() >= 1 && t.dim(0) == B * S)
    return sub_block(t, {{row * S + st, row * S + st + len}});
  if (t.rank() < 2 || t.dim(0) != B) return t;
  if (t.dim(1) == S) {
    switch (layout) {
      case RowLayout::query_key: return sub_block(t, {r, tokens, tokens});
      case RowLayout::query_entry: return sub_block(t, {r, tokens, {0, entries}});
      case RowLayout::selected_ids: return selected_ids(t, r, tokens, c);
      case RowLayout::tokens:
      case RowLayout::flat_tokens:
      case RowLayout::entries: return sub_block(t, {r, tokens});
    }
  }
  // Compressed entries: the pool and entry rope outputs, and the norm between them.
  if (rate > 0 && t.dim(1) == S / rate) return sub_block(t, {r, {0, entries}});
  return t;
}

std::vector<std::vector<std::int64_t>> batch_prompts(const Batch& batch) {
  std::vector<std::vector<std::int64_t>> out;
  const auto* ids = batch.ids.data<std::int64_t>();
  for (std::int64_t r = 0; r < batch.rows(); ++r) {
    const auto st = batch.start[static_cast<std::size_t>(r)], len = batch.length[static_cast<std::size_t>(r)];
    out.emplace_back(ids + r * batch.seq() + st, ids + r * batch.seq() + st + len);
  }
  return out;
}

}  // namespace tdiff
