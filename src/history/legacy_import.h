#pragma once
// Records an older tdiff kept inside the case file: /runs/<id> (the verdict and its report's
// CSV as attributes) and /env/<id>. Read once into the history (HistoryDb::import_case); the
// reference's own environment record (golden's) is the case's and stays there.
#include <string>
#include <vector>

#include "history/run_entry.h"

namespace tdiff::history {

std::vector<RunEntry> read_case_records(const std::string& case_path);

// The stage rows and logits figures of a report.csv's text (the columns tdiff writes; quoted
// fields as RFC 4180 has them); rows without a stage are skipped.
void add_report_csv(RunEntry& e, const std::string& csv);

}  // namespace tdiff::history
