#pragma once
// Shared by the determinism checks (bisect/determinism.h): collects bit-for-bit comparisons of
// the same tensor between runs (or batches), keeps the worst occurrence per tensor with its
// diff-engine metrics, and turns them into findings and a CompareResult for the reports.
#include <map>
#include <string>
#include <vector>

#include "checks/determinism.h"

namespace tdiff {

class FindingTable {
 public:
  // `stages`: the model order; `report`: the stage globs to report (empty: all).
  FindingTable(const std::vector<Stage>& stages, std::string report);
  // One comparison of `other` against `base`; `where` and `label` name the run or batch,
  // `inputs_identical` whether every input of the stage was identical there.
  BitDiff record(const Stage& s, const std::string& tensor, const Tensor& base, const Tensor& other, int where,
                 const std::string& label, bool inputs_identical);
  // A comparison found identical without the tensors at hand (compared on the device).
  void record_identical(const Stage& s, const std::string& tensor, std::int64_t numel);
  std::vector<Finding> findings() const;  // model order, reported stages only
  // Rows in model order; verdict FAIL with the finding as the reason, PASS when identical.
  CompareResult table(const std::string& label_ref, const std::string& label_cand,
                      const std::string& where_word) const;

 private:
  struct Entry {
    std::size_t order = 0;
    Finding finding;
    TensorDiff worst;  // metrics of the worst occurrence (or of an identical pair)
    bool have_row = false;
  };
  std::string report_;
  std::map<std::string, std::size_t> stage_order_;
  CompareOptions copt_;
  std::map<std::string, Entry> entries_;  // by key
  Entry& entry(const Stage& s, const std::string& tensor);  // created on first use
};

// "3.9e-03 in 12 of 3072 elements" (or "every element" / "shape differs").
std::string bit_diff_text(const BitDiff& d);

}  // namespace tdiff
