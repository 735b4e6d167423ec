#include "casefile/reference_store.h"

#include <cstdlib>

#include "casefile/case_file.h"
#include "casefile/stored_tensor.h"
#include "base/error.h"
#include "model/stage_graph.h"

namespace tdiff {

std::size_t default_reference_budget() {
  if (const char* gb = std::getenv("TDIFF_REF_CACHE_GB")) {
    char* end = nullptr;
    const double v = std::strtod(gb, &end);
    if (end == gb || *end != '\0' || !(v >= 0))
      input_error("TDIFF_REF_CACHE_GB: '{}' is not a number of GB (0 keeps nothing)", gb);
    return static_cast<std::size_t>(v * 1e9);
  }
  return std::size_t{4} << 30;
}

std::shared_ptr<const TensorContract> case_contract(const H5File& file) {
  const CaseInfo info = read_case(file);
  return std::make_shared<const TensorContract>(build_stages(info.config), info.config, info.batch.rows(),
                                                info.batch.seq());
}

ReferenceStore::ReferenceStore(const std::string& path, std::size_t budget_bytes)
    : ReferenceStore(H5File(path), nullptr, budget_bytes) {}

ReferenceStore::ReferenceStore(H5File file, std::shared_ptr<const TensorContract> contract, std::size_t budget_bytes)
    : file_(std::move(file)), contract_(contract ? std::move(contract) : case_contract(file_)), budget_(budget_bytes) {}

Tensor ReferenceStore::get(const std::string& stage, const std::string& tensor) {
  bool kept = false;
  Tensor t = fetch(stage, tensor, kept);
  return kept ? t.clone() : t;  // callers may scale or overwrite what they get
}

Tensor ReferenceStore::get_shared(const std::string& stage, const std::string& tensor) {
  bool kept = false;
  return fetch(stage, tensor, kept);
}

Tensor ReferenceStore::fetch(const std::string& stage, const std::string& tensor, bool& kept) {
  const std::string key = stage + "/" + tensor;
  if (auto it = kept_.find(key); it != kept_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    ++hits_;
    kept = true;
    return it->second->second;
  }
  Tensor t = read_stage_tensor(file_, "/reference", key, *contract_, StoredBy::reference);
  ++reads_;
  // Tensors share their bytes when copied: keeping one costs no copy, only the memory.
  if (!seen_.insert(key).second && t.nbytes() <= budget_) {
    while (kept_bytes_ + t.nbytes() > budget_ && !lru_.empty()) {
      kept_bytes_ -= lru_.back().second.nbytes();
      kept_.erase(lru_.back().first);
      lru_.pop_back();
    }
    lru_.emplace_front(key, t);
    kept_[key] = lru_.begin();
    kept_bytes_ += t.nbytes();
    kept = true;
  }
  return t;
}

const std::vector<std::string>& ReferenceStore::stages() {
  if (!listed_) {
    stages_ = reference_stages(file_);
    stage_set_ = std::set<std::string>(stages_.begin(), stages_.end());
    // Every stored tensor's dtype and shape, from the file's metadata (no data read): a bad one
    // stops the command before its work, not when a run reaches its stage hours later. Listed
    // only once they pass: asking again asks again.
    for (const auto& spec : contract_->specs())
      if (stage_set_.count(spec.stage) && has(spec.stage, spec.tensor))
        check_stage_tensor(file_, "/reference", spec.key(), *contract_, StoredBy::reference);
    listed_ = true;
  }
  return stages_;
}

bool ReferenceStore::has_stage(const std::string& stage) {
  stages();
  return stage_set_.count(stage) > 0;
}

bool ReferenceStore::has(const std::string& stage, const std::string& tensor) const {
  return h5_exists(file_, "/reference/" + stage + "/" + tensor);
}

std::optional<StoredConditioning> ReferenceStore::conditioning(const std::string& key) {
  auto it = conditioning_.find(key);
  if (it == conditioning_.end()) it = conditioning_.emplace(key, read_conditioning(file_, key, *contract_)).first;
  return it->second;
}

}  // namespace tdiff
