#pragma once
// Where an element of a stage's tensor sits in the model's terms (batch row, token, head,
// stream, channel, expert, entry), in the tensor's original layout: what a report prints beside
// a flat index so that a reader can find the error.
//
// The axes are the tensor contract's (model/tensor_contract.h) for the case's batch, so the
// names have one source: B is "row", S "token" ("query" and "key" for scores and masks), the
// router and MoE's flattened N = B*S a row and a token, H a head, n_hc a stream, E an expert,
// n an entry, k and K a slot, V a vocabulary id, every feature axis a channel (G*R_o as group
// and channel, CSA's two windows 2d as window and channel). A tensor judged on its real rows
// only (a padded dump, diff/real_rows.h) is located back at its row and token of the padded
// batch, and so is one judged without a free run's diverged tokens. Without a case, or for a
// key the model has no stage output of, the dimensions are plain ("dim0 1, dim1 3").
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/tensor.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/stage_graph.h"

namespace tdiff {

class DivergedTokens;
class TensorContract;
struct TensorSpec;
struct TensorDiff;

// (axis, index) pairs, outermost first: {{"row", 1}, {"token", 23}, {"head", 2}, {"ch", 17}}.
using Location = std::vector<std::pair<std::string, std::int64_t>>;

class Locator {
 public:
  Locator() = default;  // no case at hand: plain dimensions
  // `divergence`: a free run's diverged tokens (diff/divergence.h), whose rows its tensors were
  // judged without; null: none.
  Locator(const std::vector<Stage>& stages, const ModelConfig& config, const Batch& batch,
          std::shared_ptr<const DivergedTokens> divergence = nullptr);

  // Element `flat` of the tensor `key` ("<stage>/<tensor>") as compared, in shape `compared`:
  // the full shape (size-1 dimensions aside) or its real rows only. Empty when `flat` is outside it.
  Location locate(const std::string& key, const Shape& compared, std::int64_t flat) const;
  // The same element's flat index in the full layout (a padded dump's real rows back in the
  // padded batch); `flat` itself where nothing maps it, -1 outside the tensor.
  std::int64_t original_index(const std::string& key, const Shape& compared, std::int64_t flat) const;

 private:
  // `flat` of `compared` in the spec's full layout; nullopt when `compared` is neither it nor its real rows.
  std::optional<std::int64_t> in_full_layout(const TensorSpec& spec, const Shape& compared, std::int64_t flat) const;

  std::shared_ptr<const TensorContract> contract_;
  Batch batch_;
  std::shared_ptr<const DivergedTokens> divergence_;
  std::map<std::string, std::int64_t> rate_;  // stage -> the rate its real rows are taken at
  std::int64_t o_groups_ = 0;
};

// `locator`'s location, plain dimensions when it is null (no case at hand).
Location locate(const Locator* locator, const std::string& key, const Shape& compared, std::int64_t flat);
// "row 1, token 23, head 2, ch 17".
std::string location_text(const Location& at);

// The element a report points a reader at, and what it is:
//   new_nan, new_inf   the first NaN/Inf of the candidate the reference lacks (always a FAIL);
//   largest_error      else a float's element of err_rel (metrics.h);
//   other_selection    a selection's first token whose id set differs (its first unexplained
//                      one when the run replayed selections: what the verdict counts);
//   differs            an exact tensor's (a mask's) element of its largest difference.
enum class Pointed { none, new_nan, new_inf, largest_error, other_selection, differs };
struct PointedElement {
  Pointed what = Pointed::none;
  std::int64_t flat = -1;  // a selection's: its token's first id
  bool whole_row = false;  // a selection: the token, not one slot of it (their order is irrelevant)
  bool has_values = false;
  double ref = 0, cand = 0;
};
PointedElement pointed_element(const TensorDiff& d);
// "new NaN", "new Inf", "largest error", "other selection", "differs".
const char* pointed_name(Pointed p);
// The pointed element's location (a selection's without its slot); empty for none.
Location locate_pointed(const Locator* locator, const TensorDiff& d, const PointedElement& e);

}  // namespace tdiff
