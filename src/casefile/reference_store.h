#pragma once
// A case's /reference as a session reads it. A bisection reads the same reference tensors in
// every mixed run (the watched output, the selection scores, the stages it reuses), and at
// real widths one of them can be a GB (the logits): a tensor read a second time is kept in
// memory, least recently used dropped beyond a budget (TDIFF_REF_CACHE_GB, default 4 GB), so
// a one-pass reader (`tdiff run`) holds nothing extra and a bisection reads each one once.
#include <cstddef>
#include <list>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace tdiff {

// TDIFF_REF_CACHE_GB (an InputError when it is not a number >= 0), else 4 GB.
std::size_t default_reference_budget();

class ReferenceStore {
 public:
  explicit ReferenceStore(std::string path, std::size_t budget_bytes = default_reference_budget());
  // /reference/<stage>/<tensor> (an InputError naming it when missing, as read_reference),
  // the caller's to change: a kept tensor is copied.
  Tensor get(const std::string& stage, const std::string& tensor);
  // The same, sharing its bytes with the store (no copy): for readers only (compare).
  Tensor get_shared(const std::string& stage, const std::string& tensor);
  // The stages under /reference (reference_stages()), listed once.
  const std::vector<std::string>& stages();
  bool has_stage(const std::string& stage);
  // Forgets every kept tensor and the listing (after the reference was rewritten).
  void clear();

  std::size_t budget() const { return budget_; }
  std::size_t kept_bytes() const { return kept_bytes_; }
  std::size_t reads() const { return reads_; }  // from the file
  std::size_t hits() const { return hits_; }    // from memory

 private:
  Tensor fetch(const std::string& stage, const std::string& tensor, bool& kept);
  std::string path_;
  std::size_t budget_;
  std::list<std::pair<std::string, Tensor>> lru_;  // most recently used first
  std::map<std::string, std::list<std::pair<std::string, Tensor>>::iterator> kept_;
  std::set<std::string> seen_;  // read once: kept when read again
  std::size_t kept_bytes_ = 0, reads_ = 0, hits_ = 0;
  bool listed_ = false;
  std::vector<std::string> stages_;
  std::set<std::string> stage_set_;
};

}  // namespace tdiff
