#pragma once
// The step table of a generation case's report.html: each logits row that predicts a generated
// token, its verdict (diff/token_verdicts.h), the two sides' tokens, the reference's margin
// against the bound, and the log-probabilities. Steps that are not MATCH always shown; the
// MATCH ones up to a limit.
#include <string>

#include "diff/compare.h"

namespace tdiff::report {

std::string token_table_html(const CompareResult& r);

}  // namespace tdiff::report
