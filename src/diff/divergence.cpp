#include "diff/divergence.h"

#include <algorithm>


namespace tdiff {

DivergedTokens::DivergedTokens(const std::vector<Stage>& stages, const ModelConfig& config, const Batch& batch)
    : batch_(batch), since_(static_cast<std::size_t>(batch.rows() * batch.seq()), -1) {
  for (std::size_t i = 0; i < stages.size(); ++i) {
    index_[stages[i].name] = i;
    rate_[stages[i].name] = real_rows_rate(stages[i], config);
  }
}

std::size_t DivergedTokens::index_of(const std::string& stage) const {
  const auto it = index_.find(stage);
  return it == index_.end() ? kUnknown : it->second;
}

bool DivergedTokens::diverged_before(std::size_t stage_index, std::int64_t token) const {
  const std::int64_t since = since_[static_cast<std::size_t>(token)];
  return since >= 0 && static_cast<std::size_t>(since) < stage_index;
}

std::int64_t DivergedTokens::mark(const Stage& s, const Tensor& ref, const Tensor& cand) {
  const std::int64_t tokens = batch_.rows() * batch_.seq();
  if (!ref.defined() || !cand.defined() || ref.numel() != cand.numel() || ref.rank() < 1 || tokens == 0 ||
      ref.numel() % tokens != 0)
    return 0;
  const std::int64_t k = ref.numel() / tokens;
  const Tensor a = ref.to(DType::i64), b = cand.to(DType::i64);
  const std::int64_t* pa = a.data<std::int64_t>();
  const std::int64_t* pb = b.data<std::int64_t>();
  const std::uint8_t* mask = batch_.mask.data<std::uint8_t>();
  if (index_of(s.name) == kUnknown) return 0;
  const auto at = static_cast<std::int64_t>(index_of(s.name));
  std::vector<std::int64_t> ra(static_cast<std::size_t>(k)), rb(static_cast<std::size_t>(k));
  std::int64_t marked = 0;
  for (std::int64_t t = 0; t < tokens; ++t) {
    if (!mask[t] || since_[static_cast<std::size_t>(t)] >= 0) continue;
    std::copy(pa + t * k, pa + (t + 1) * k, ra.begin());
    std::copy(pb + t * k, pb + (t + 1) * k, rb.begin());
    std::sort(ra.begin(), ra.end());
    std::sort(rb.begin(), rb.end());
    if (ra == rb) continue;
    since_[static_cast<std::size_t>(t)] = at;
    ++marked;
  }
  if (marked && first_.empty()) first_ = s.name;
  return marked;
}

std::vector<bool> DivergedTokens::diverged_rows(const std::string& stage, const Shape& shape) const {
  const std::size_t at = index_of(stage);
  if (at == kUnknown) return {};
  const auto rate = rate_.at(stage);
  const RealRows layout = real_rows(shape, batch_, rate);
  std::vector<bool> out(static_cast<std::size_t>(layout.rows), false);
  const std::int64_t B = batch_.rows(), S = batch_.seq();
  if (layout.rows == B * S) {  // one row per token: [B, S, ...] or [B*S, ...]
    for (std::int64_t t = 0; t < layout.rows; ++t) out[static_cast<std::size_t>(t)] = diverged_before(at, t);
  } else if (rate > 0 && shape.size() >= 2 && shape[0] == B && layout.rows == B * shape[1]) {
    // Compressed entries: entry w of row b pools positions [w*rate, (w+1)*rate) of that row.
    const std::int64_t n = shape[1];
    for (std::int64_t r = 0; r < layout.rows; ++r) {
      const std::int64_t b = r / n, w = r % n;
      for (std::int64_t p = w * rate; p < std::min((w + 1) * rate, S); ++p)
        if (diverged_before(at, b * S + p)) out[static_cast<std::size_t>(r)] = true;
    }
  }
  return out;
}

RealRows DivergedTokens::layout(const std::string& stage, const Shape& shape) const {
  const auto rate = rate_.find(stage);
  RealRows rows = real_rows(shape, batch_, rate == rate_.end() ? 0 : rate->second);
  rows.real.assign(rows.real.size(), true);
  return rows;
}

std::int64_t DivergedTokens::exclude(const std::string& stage, const Shape& shape, RealRows& rows) const {
  const std::vector<bool> gone = diverged_rows(stage, shape);
  if (gone.size() != rows.real.size()) return 0;
  std::int64_t n = 0;
  for (std::size_t r = 0; r < gone.size(); ++r)
    if (gone[r] && rows.real[r]) {
      rows.real[r] = false;
      ++n;
    }
  return n;
}

std::int64_t DivergedTokens::tokens() const {
  return static_cast<std::int64_t>(std::count_if(since_.begin(), since_.end(), [](std::int64_t s) { return s >= 0; }));
}

}  // namespace tdiff
