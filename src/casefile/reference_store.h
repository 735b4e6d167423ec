#pragma once
// A case's /reference as a session reads it: through one open file (casefile/h5_reader.h
// H5File), so a command judges against the reference it opened even when `tdiff golden`
// replaces the case meanwhile, and every tensor checked against the case's tensor contract
// (casefile/stored_tensor.h) before anyone computes with it. A bisection reads the same
// reference tensors in every mixed run (the watched output, the selection scores, the stages
// it reuses), and at real widths one of them can be a GB (the logits): a tensor read a second
// time is kept in memory, least recently used dropped beyond a budget (TDIFF_REF_CACHE_GB,
// default 4 GB), so a one-pass reader (`tdiff run`) holds nothing extra and a bisection reads
// each one once.
//
// A boundaries reference (golden --store boundaries; casefile/reference_layers.h) stores a few
// stages per layer; the store answers for every stage all the same. Reading a stage it does not
// hold recomputes that stage's whole layer from the stored boundary with the model's weights, and
// keeps the asked stage's outputs and those after it in the same budget (recomputed tensors are
// kept at once, not on their second read), so a reader walking the stages in order recomputes
// each layer once while a layer's outputs fit the budget. Every recomputed layer is checked
// against what the reference stores of it (its boundary and its selections) bit for bit.
#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "casefile/h5_reader.h"
#include "casefile/reference_layers.h"
#include "casefile/stored_tensor.h"
#include "model/tensor_contract.h"

namespace tdiff {

// TDIFF_REF_CACHE_GB (an InputError when it is not a number >= 0), else 4 GB.
std::size_t default_reference_budget();

class ReferenceStore {
 public:
  // Opens the case at `path`; its model and batch give the contract.
  explicit ReferenceStore(const std::string& path, std::size_t budget_bytes = default_reference_budget());
  // A session's: the file it holds open and its case's contract.
  ReferenceStore(H5File file, std::shared_ptr<const TensorContract> contract,
                 std::size_t budget_bytes = default_reference_budget());
  ~ReferenceStore();
  // /reference/<stage>/<tensor> (an InputError naming it when missing or when it breaks the
  // contract), the caller's to change: a kept tensor is copied.
  Tensor get(const std::string& stage, const std::string& tensor);
  // The same, sharing its bytes with the store (no copy): for readers only (compare).
  Tensor get_shared(const std::string& stage, const std::string& tensor);
  // The stages under /reference (reference_stages()), listed once, and on a boundaries reference
  // the layers' stages it recomputes, in stage order. Listing checks every stored tensor's dtype
  // and shape against the contract (InputError), so commands, which list first, refuse a bad
  // reference before they compute; selection ranges are checked as they are read.
  // /conditioning/<stage>/<tensor> (read_conditioning: checked), kept once read.
  std::optional<StoredConditioning> conditioning(const std::string& key);
  const std::vector<std::string>& stages();
  bool has_stage(const std::string& stage);
  bool has(const std::string& stage, const std::string& tensor);
  // What the file holds, without the recomputed stages (golden --verify checks these).
  bool stored(const std::string& stage);
  const std::vector<std::string>& stored_stages();

  // The model a boundaries reference recomputes its layers with: the session's folder and
  // weights (open_session). Without it, the folder the case records is opened when first needed.
  void use_model(std::string model_dir, WeightStore* weights);
  // The /reference attribute "store" (kStoreAll, kStoreBoundaries, kStoreStages); "" for a
  // reference written before it existed (read as stored, nothing recomputed).
  const std::string& store_kind() const { return store_kind_; }
  std::size_t recomputed_layers() const { return recomputed_layers_; }  // layer runs so far

  const H5File& file() const { return file_; }
  const TensorContract& contract() const { return *contract_; }
  std::size_t budget() const { return budget_; }
  std::size_t kept_bytes() const { return kept_bytes_; }
  std::size_t reads() const { return reads_; }  // from the file
  std::size_t hits() const { return hits_; }    // from memory

 private:
  Tensor fetch(const std::string& stage, const std::string& tensor, bool& kept);
  bool recomputes(const std::string& stage);  // a boundaries reference's stage that the file lacks
  Tensor recompute(const std::string& stage, const std::string& tensor, bool& kept);
  void keep(const std::string& key, const Tensor& t);  // most recently used; the caller made room
  void make_room(std::size_t bytes);                    // drops the least recently used
  LayerRecompute& layers();
  H5File file_;
  std::shared_ptr<const TensorContract> contract_;
  std::size_t budget_;
  std::list<std::pair<std::string, Tensor>> lru_;  // most recently used first
  std::map<std::string, std::list<std::pair<std::string, Tensor>>::iterator> kept_;
  std::set<std::string> seen_;  // read once: kept when read again
  std::map<std::string, std::optional<StoredConditioning>> conditioning_;
  std::size_t kept_bytes_ = 0, reads_ = 0, hits_ = 0;
  bool listed_ = false;
  std::vector<std::string> stages_, stored_;
  std::set<std::string> stage_set_, stored_set_;
  std::string store_kind_;
  std::string model_dir_;
  WeightStore* weights_ = nullptr;
  std::unique_ptr<WeightStore> own_weights_;  // a store opened by path: the model it opened itself
  std::unique_ptr<LayerRecompute> layers_;
  std::size_t recomputed_layers_ = 0;
};

// The store of `group` of `file` when that is a case's /reference holding the layer boundaries
// only (golden --store boundaries), which readers of files (compare, saved runs, dumps) read
// through it so that the stages it lacks are recomputed; null for any other group or reference.
// `contract`: null takes the case's.
std::shared_ptr<ReferenceStore> boundaries_reference(const H5File& file, const std::string& group,
                                                     std::shared_ptr<const TensorContract> contract = nullptr);

// The contract of the case `file` holds (its model config and batch).
std::shared_ptr<const TensorContract> case_contract(const H5File& file);

}  // namespace tdiff
