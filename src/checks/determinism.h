#pragma once
// Determinism checks of a backend (tdiff determinism):
// - run to run: the whole stage graph N times (emu: each run with its own run seed, as separate
//   GPU runs order their atomics differently; refcpu: also across OpenMP thread counts), every
//   stage output compared bit for bit with run 1;
// - batch invariance: every prompt of the case alone and inside batches of the other prompts,
//   at every row position, padded on the chosen sides; the prompt's part of every stage output
//   (bisect/row_slice.h) compared bit for bit with the prompt alone.
// Memory: one run's stage outputs (run-to-run), one row's outputs per prompt (batch sweep).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/executor.h"
#include "numerics/policy.h"
#include "casefile/session.h"
#include "base/timing.h"
#include "diff/compare.h"
#include "exec/device_comparison.h"

namespace tdiff {

// A fresh backend for one run. `run_seed` drives emu's run-dependent orders.
using BackendFactory = std::function<std::unique_ptr<Backend>(std::uint64_t run_seed)>;

// Bit-for-bit comparison of two tensors (different shapes or dtypes: every element differs).
struct BitDiff {
  std::int64_t numel = 0, differing = 0;  // elements whose bytes differ
  double max_abs = 0.0;                   // largest |a - b| among them (inf: one side non-finite)
  bool identical() const { return differing == 0; }
};
BitDiff bit_diff(const Tensor& a, const Tensor& b);

// A tensor that was not reproduced bit for bit.
struct Finding {
  std::string stage, tensor;
  std::vector<int> where;   // the runs (1-based) or sweep batches (0-based) where it differed
  double max_abs = 0.0;     // the largest difference over all of them
  std::int64_t differing = 0, numel = 0;  // elements that differ in the worst occurrence
  std::string worst;        // the occurrence of max_abs, in words
  bool origin = false;      // differed somewhere while every input of its stage was identical
  std::string key() const { return stage + "/" + tensor; }
};

struct RunSpec {
  int number = 1;  // 1-based
  std::uint64_t seed = 0;
  int threads = 0;
  std::string label() const;  // "run 2 (seed 8, 4 threads)"
};

struct DeterminismOptions {
  int runs = 3;              // at least 2; raised to the number of thread counts
  std::vector<int> threads;  // run k uses threads[(k-1) % size]; empty: the current OpenMP count
  std::uint64_t seed = 1;    // run k gets seed + k - 1
  std::string stages;        // report only these (globs); every stage runs and is checked
  // Run 1's outputs by key when the caller already has them (tdiff ci): run 1 is not repeated.
  const TensorMap* run1 = nullptr;
  // Compare on the backend's device (exec/device_comparison.h; `--on-device`): each run's
  // outputs stay there and only the comparison and the differing tensors reach the host, where
  // those are compared again: the findings are the host comparison's.
  DeviceComparison* on_device = nullptr;
  std::function<void(const RunSpec&, const Stage&, std::size_t index)> progress;
};

struct DeterminismResult {
  std::vector<RunSpec> runs;
  std::vector<Finding> findings;  // model order
  // Every reported tensor: run 1 against its worst run, verdict FAIL when not bit-identical
  // (metrics from the diff engine, so the report writers render it).
  CompareResult table;
  double seconds = 0;
  // Where each run's time went (base/timing.h): backend setup, candidate, finish, compare;
  // one per entry of `runs` (empty for a run 1 the caller gave).
  std::vector<PhaseTimes> run_times;
  bool deterministic() const { return findings.empty(); }
};

DeterminismResult check_determinism(CaseSession& session, const BackendFactory& make, const DeterminismOptions& opt);

// One batch of the sweep: `prompts` (indices into the case's rows) in row order.
struct SweepBatch {
  int size = 1;
  bool pad_left = false;
  std::int64_t seq = 0;  // padded length
  std::vector<int> prompts;
  std::string label() const;  // "batch of 4 [2,3,0,1], left padding to 40"
};

struct BatchSweepOptions {
  std::vector<int> sizes = {1, 2, 4, 8};
  std::vector<bool> pad_left = {false};  // padding sides to sweep
  std::uint64_t seed = 1;                // the same run seed for every batch
  std::string stages;                    // report only these (globs)
  std::function<void(std::size_t batch, std::size_t total, const SweepBatch&)> progress;
};

struct SizeSummary {
  int size = 0;
  int batches = 0;
  int tensors_differing = 0;   // tensors of some prompt that differ from the prompt alone
  double max_abs = 0.0;
  std::string first_origin;    // the first origin stage in model order ("" if none)
};

struct BatchSweepResult {
  int prompts = 0;
  std::vector<SweepBatch> batches;
  std::vector<Finding> findings;  // model order; `where` holds batch indices
  std::vector<SizeSummary> sizes;
  CompareResult table;  // every reported tensor: prompt alone against its worst batch
  double seconds = 0;
  bool invariant() const { return findings.empty(); }
};

// Batch size b: for every rotation i of the case's prompts, the batch [p_i, p_i+1, ... p_i+b-1]
// (indices mod the prompt count), padded to its longest prompt; each prompt sits once at every
// row position (when b <= prompts). The first batch that holds a prompt is its baseline
// (its run alone when 1 is among the sizes).
BatchSweepResult check_batch_invariance(CaseSession& session, const BackendFactory& make, const BatchSweepOptions& opt);

// Why a known non-invariance happens, for the report ("" when none is known).
std::string known_batch_variance(const std::string& backend, const Policy& policy, const Stage& s);

}  // namespace tdiff
