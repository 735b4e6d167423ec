#pragma once
// What a synthetic model is drawn with: storage dtype, outliers, profile (synth.h draws it).
#include "base/dtype.h"

namespace tdiff {

// Profiles (--profile): `standard` ("default") draws every weight as described in synth.cpp;
// `trained` reshapes a few of them so that the float64 reference shows the statistics of trained
// LLMs (sharp attention heads with logits of tens, learned sinks taking most of the mass in
// many heads, massive activations, near-tied router scores). The construction and the
// published ranges it aims at: synth_profile.h. Every weight not named there is drawn as in
// the default profile, from the same random stream.
enum class SynthProfile { standard, trained };

struct SynthOptions {
  bool outliers = false;
  DType dtype = DType::f32;  // f32 or bf16
  SynthProfile profile = SynthProfile::standard;
};

}  // namespace tdiff
