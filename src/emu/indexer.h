#pragma once
// The indexer family's knobs -> kernel spec, for emu and hip alike: q·k dots, the ReLU'd
// head terms and their weighted sum in index_score (the head weights stored in it too), the
// QI / KI inputs read in the storage format. The selection takes topk_spec (emu/topk.h).
#include "numerics/policy.h"
#include "emu/numerics.h"

namespace tdiff::emu {

struct IndexerSpec {
  Fmt st;     // QI, KI as stored
  Fmt score;  // index_score
};
IndexerSpec indexer_spec(const Numerics& num);

}  // namespace tdiff::emu
