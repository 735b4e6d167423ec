#pragma once
// The forward pass as a flat, ordered list of stages (model-spec §4). Every other
// part of tdiff (backends, executor, taps, diff, bisector, reports) works on this list.
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/op_table.h"

namespace tdiff {

// A stage output consumed by a later stage: "<stage>/<tensor>", or "inputs/<name>" for the
// case inputs (ids, mask, pos).
struct TensorRef {
  std::string stage;
  std::string tensor;
  std::string key() const { return stage + "/" + tensor; }
};

struct Stage {
  std::string name;        // stable public name, e.g. "L03.attn.core"
  std::string op_class;    // the name without its layer: "attn.core" (attribution, reports)
  OpKind kind;
  int layer = -1;          // -1 for prologue/epilogue
  LayerType layer_type = LayerType::sliding;
  std::vector<TensorRef> inputs;
  std::vector<std::string> outputs;  // tensor names, stored as "<stage>/<name>"
  std::vector<std::string> weights;  // HF parameter names
  // Operator parameters that the kind alone does not fix.
  bool compress_rope = false;  // RoPE table: compress (CSA/HCA layers) instead of main
  std::int64_t rate = 0;       // compression rate for pool/entry_rope/idx/cmp_mask stages
  bool overlap = false;        // overlapping (CSA) pooling
  std::int64_t width = 0;      // head width for head_rms_norm/rope/pool (d, d_I)
  // rms_norm of a hyper-connection collapse (attn_norm, ffn_norm, final.norm): its input is
  // in the stream dtype (model-spec §3.7), so candidates read it in the policy's stream format.
  bool stream_input = false;
};

std::vector<Stage> build_stages(const ModelConfig& c);
// "<stage>/<tensor>" of every output, in stage order (what threshold patterns are checked against).
std::vector<std::string> output_keys(const std::vector<Stage>& stages);

}  // namespace tdiff
