#include "hip/run_compare.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace tdiff::hip {

namespace {

std::size_t elem_bytes(DType dt) {
  switch (dt) {
    case DType::f32: return 4;
    case DType::i64: return 8;
    case DType::u8:
    case DType::boolean: return 1;
    default: throw std::logic_error("run_compare: a device tensor is f32, i64 or u8");
  }
}

// The values of a device tensor on the host (float32 values, int64, bool).
Tensor to_host(const std::shared_ptr<DeviceBuffer>& buf, const Shape& shape, DType dt, Stream s) {
  Tensor t(dt == DType::u8 ? DType::boolean : dt, shape);
  copy_d2h(t.raw(), buf->get(), t.nbytes(), s);
  return t;
}

}  // namespace

BitCount* RunSnapshot::slot(std::size_t i, Stream s) {
  while (i >= slots_.size() * kSlots) {  // zeroed once here, then by collect() for the next run
    slots_.emplace_back(kSlots * sizeof(BitCount));
    memset_async(slots_.back().get(), 0, kSlots * sizeof(BitCount), s);
  }
  return slots_[i / kSlots].as<BitCount>() + i % kSlots;
}

void RunSnapshot::keep(const std::string& key, const std::shared_ptr<DeviceBuffer>& buf, const Shape& shape, DType dtype,
                       Stream s) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * elem_bytes(dtype);
  auto copy = std::make_shared<DeviceBuffer>(std::max<std::size_t>(bytes, 1));
  copy_d2d(copy->get(), buf->get(), bytes, s);
  auto& k = kept_[key];
  if (k.buf) kept_bytes_ -= k.buf->bytes();
  k = {copy, shape, dtype};
  kept_bytes_ += copy->bytes();
}

void RunSnapshot::compare(const std::string& key, const std::shared_ptr<DeviceBuffer>& buf, const Shape& shape,
                          DType dtype, Stream s) {
  const std::size_t i = pending_.size();
  BitCount* out = slot(i, s);
  const auto k = kept_.find(key);
  if (k != kept_.end() && k->second.shape == shape && k->second.dtype == dtype)
    compare_bits(k->second.buf->get(), buf->get(), shape_numel(shape), static_cast<int>(elem_bytes(dtype)), out, s);
  pending_.push_back({key, {buf, shape, dtype}, i});
}

std::vector<RunSnapshot::Diff> RunSnapshot::collect(Stream s) {
  std::vector<BitCount> counts(pending_.size());
  for (std::size_t c = 0; c * kSlots < counts.size(); ++c)
    copy_d2h(counts.data() + c * kSlots, slots_[c].get(), std::min(kSlots, counts.size() - c * kSlots) * sizeof(BitCount), s);
  stream_sync(s);
  std::vector<Diff> out;
  for (const auto& p : pending_) {
    Diff d;
    d.key = p.key;
    d.numel = shape_numel(p.now.shape);
    const auto k = kept_.find(p.key);
    const bool comparable = k != kept_.end() && k->second.shape == p.now.shape && k->second.dtype == p.now.dtype;
    if (comparable) {
      const BitCount& c = counts[p.slot];
      d.differing = static_cast<std::int64_t>(c.differing);
      float m;
      std::memcpy(&m, &c.max_abs_bits, sizeof m);
      d.max_abs = m;
    } else {
      d.differing = d.numel;
      d.max_abs = std::numeric_limits<double>::infinity();
    }
    if (d.differing) {  // the only tensors that cross the link
      d.other = to_host(p.now.buf, p.now.shape, p.now.dtype, s);
      if (k != kept_.end()) d.base = to_host(k->second.buf, k->second.shape, k->second.dtype, s);
    }
    out.push_back(std::move(d));
  }
  for (std::size_t c = 0; c * kSlots < counts.size(); ++c)  // the next run's counts start at zero
    memset_async(slots_[c].get(), 0, std::min(kSlots, counts.size() - c * kSlots) * sizeof(BitCount), s);
  stream_sync(s);
  pending_.clear();
  return out;
}

}  // namespace tdiff::hip
