#pragma once
// SGLang's p_vs_d check for a generation case (docs/guide/generation.md): the candidate runs the
// case's schedule in steps against its cache and, apart, the whole sequence as one prefill, all
// its stages on itself and following its own selections; the two logits are compared over the
// rows that predict a decoded token. The reference is not involved: a decode path (cache,
// single-token kernels, chunk boundaries) that departs from the candidate's own prefill shows
// here even where the formats' error would hide it against the reference.
#include "backend/backend.h"
#include "casefile/session.h"
#include "diff/compare.h"

namespace tdiff {

// InputError for a prefill case, or a candidate that does not run steps.
PrefillVsDecode prefill_vs_decode(CaseSession& session, Backend& candidate);

}  // namespace tdiff
