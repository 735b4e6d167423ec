#include "casefile/reference_store.h"

#include <cstdlib>

#include <cstring>

#include "casefile/case_file.h"
#include "casefile/session.h"
#include "casefile/stored_tensor.h"
#include "base/error.h"
#include "formats/weights.h"
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

std::shared_ptr<ReferenceStore> boundaries_reference(const H5File& file, const std::string& group,
                                                     std::shared_ptr<const TensorContract> contract) {
  std::string g = group;
  while (!g.empty() && g.back() == '/') g.pop_back();
  if (g != "/reference" || !h5_exists(file, g)) return nullptr;
  const auto attrs = h5_read_attrs(file, g);
  const auto it = attrs.find("store");
  if (it == attrs.end() || it->second != kStoreBoundaries) return nullptr;
  return std::make_shared<ReferenceStore>(file, std::move(contract));
}

std::shared_ptr<const TensorContract> case_contract(const H5File& file) {
  const CaseInfo info = read_case(file);
  return std::make_shared<const TensorContract>(build_stages(info.config), info.config, info.batch.rows(),
                                                info.batch.seq());
}

ReferenceStore::ReferenceStore(const std::string& path, std::size_t budget_bytes)
    : ReferenceStore(H5File(path), nullptr, budget_bytes) {}

ReferenceStore::ReferenceStore(H5File file, std::shared_ptr<const TensorContract> contract, std::size_t budget_bytes)
    : file_(std::move(file)), contract_(contract ? std::move(contract) : case_contract(file_)), budget_(budget_bytes) {
  if (h5_exists(file_, "/reference")) {
    const auto attrs = h5_read_attrs(file_, "/reference");
    if (const auto it = attrs.find("store"); it != attrs.end()) store_kind_ = it->second;
  }
}

ReferenceStore::~ReferenceStore() = default;

void ReferenceStore::use_model(std::string model_dir, WeightStore* weights) {
  model_dir_ = std::move(model_dir);
  weights_ = weights;
}

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
  if (recomputes(stage) && contract_->find(key)) return recompute(stage, tensor, kept);
  Tensor t = read_stage_tensor(file_, "/reference", key, *contract_, StoredBy::reference);
  ++reads_;
  // Tensors share their bytes when copied: keeping one costs no copy, only the memory.
  if (!seen_.insert(key).second && t.nbytes() <= budget_) {
    make_room(t.nbytes());
    keep(key, t);
    kept = true;
  }
  return t;
}

void ReferenceStore::make_room(std::size_t bytes) {
  while (kept_bytes_ + bytes > budget_ && !lru_.empty()) {
    kept_bytes_ -= lru_.back().second.nbytes();
    kept_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

void ReferenceStore::keep(const std::string& key, const Tensor& t) {
  seen_.insert(key);
  lru_.emplace_front(key, t);
  kept_[key] = lru_.begin();
  kept_bytes_ += t.nbytes();
}

const std::vector<std::string>& ReferenceStore::stored_stages() {
  stages();
  return stored_;
}

bool ReferenceStore::stored(const std::string& stage) {
  stages();
  return stored_set_.count(stage) > 0;
}

const std::vector<std::string>& ReferenceStore::stages() {
  if (!listed_) {
    stored_ = reference_stages(file_);
    stored_set_ = std::set<std::string>(stored_.begin(), stored_.end());
    // Every stored tensor's dtype and shape, from the file's metadata (no data read): a bad one
    // stops the command before its work, not when a run reaches its stage hours later. Listed
    // only once they pass: asking again asks again.
    for (const auto& spec : contract_->specs())
      if (stored_set_.count(spec.stage) && h5_exists(file_, "/reference/" + spec.key()))
        check_stage_tensor(file_, "/reference", spec.key(), *contract_, StoredBy::reference);
    stages_ = stored_;
    if (store_kind_ == kStoreBoundaries) {  // every stage of a layer, in stage order
      stages_.clear();
      for (const auto& s : build_stages(read_case(file_).config))
        if (stored_set_.count(s.name) || s.layer >= 0) stages_.push_back(s.name);
    }
    stage_set_ = std::set<std::string>(stages_.begin(), stages_.end());
    listed_ = true;
  }
  return stages_;
}

bool ReferenceStore::has_stage(const std::string& stage) {
  stages();
  return stage_set_.count(stage) > 0;
}

bool ReferenceStore::has(const std::string& stage, const std::string& tensor) {
  if (recomputes(stage)) return contract_->find(stage + "/" + tensor) != nullptr;
  return h5_exists(file_, "/reference/" + stage + "/" + tensor);
}

bool ReferenceStore::recomputes(const std::string& stage) {
  return store_kind_ == kStoreBoundaries && has_stage(stage) && !stored(stage);
}

LayerRecompute& ReferenceStore::layers() {
  if (layers_) return *layers_;
  const CaseInfo info = read_case(file_);
  if (!weights_) {  // a store opened by path: the model the case records (or use_model's folder)
    own_weights_ = std::make_unique<WeightStore>(case_model_folder(file_.path(), info, model_dir_), info.config);
    weights_ = own_weights_.get();
  }
  const auto attrs = h5_read_attrs(file_, "/reference");
  const auto tie = attrs.find("tie_rule");
  const TieRule rule = parse_tie_rule(tie != attrs.end() ? tie->second : "lowest-index");
  layers_ = std::make_unique<LayerRecompute>(build_stages(info.config), info.config, info.batch, rule, *weights_);
  return *layers_;
}

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

// The asked stage's whole layer, from its stored boundary. Kept: the asked stage's outputs and
// those of the stages after it, as many as the budget holds from the asked one on (a reader
// walks the stages in order). The layer's stored stages are checked bit for bit against the file.
Tensor ReferenceStore::recompute(const std::string& stage, const std::string& tensor, bool& kept) {
  LayerRecompute& layers = this->layers();
  const std::string asked_key = stage + "/" + tensor;
  Tensor asked;
  std::vector<std::pair<std::string, Tensor>> fresh;
  std::size_t fresh_bytes = 0;
  bool from_asked = false, full = false;
  auto outside = [&](const TensorRef& r) {
    bool k = false;
    return fetch(r.stage, r.tensor, k);
  };
  layers.run(layers.layer_of(stage), outside, [&](const Stage& s, const std::vector<Tensor>& out) {
    from_asked |= s.name == stage;
    const bool in_file = stored(s.name);
    for (std::size_t k = 0; k < out.size(); ++k) {
      const std::string key = s.name + "/" + s.outputs[k];
      const Shape shape = contract_->find(key)->shape();  // as read_stage_tensor gives a stored one
      const Tensor t = out[k].shape() == shape ? out[k] : out[k].reshaped(shape);
      if (in_file) {
        bool k2 = false;
        if (!same_bits(t, fetch(s.name, s.outputs[k], k2)))
          input_error("{}: {} recomputed from the stored layer boundary differs from the stored one: the model's "
                      "weights or this build's refcpu are not those `tdiff golden` used (run it again)",
                      file_.path(), key);
        continue;
      }
      if (key == asked_key) asked = t;
      if (!from_asked || full || kept_.count(key)) continue;
      if (fresh_bytes + t.nbytes() > budget_) {
        full = true;
        continue;
      }
      fresh.emplace_back(key, t);
      fresh_bytes += t.nbytes();
    }
  });
  ++recomputed_layers_;
  make_room(fresh_bytes);
  for (auto it = fresh.rbegin(); it != fresh.rend(); ++it) keep(it->first, it->second);  // the asked one most recent
  kept = kept_.count(asked_key) > 0;
  return asked;
}

std::optional<StoredConditioning> ReferenceStore::conditioning(const std::string& key) {
  auto it = conditioning_.find(key);
  if (it == conditioning_.end()) it = conditioning_.emplace(key, read_conditioning(file_, key, *contract_)).first;
  return it->second;
}

}  // namespace tdiff
