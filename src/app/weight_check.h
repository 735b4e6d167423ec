#pragma once
// --force and --verify-weights of golden and run: the model's weight files are checked against
// what the case records (formats/weight_files.h) before any stage reads them.
#include <string>

#include "casefile/case_file.h"
#include "casefile/session.h"
#include "formats/weight_files.h"

namespace tdiff::app {

struct WeightCheckOptions {
  bool force = false;
  std::string verify = "quick";  // quick | full

  // A changed, missing or extra weight file is an InputError naming it, unless --force: then
  // one warning line on stderr, and note() says so for the run's environment record.
  WeightCheck check(const CaseSession& s) const;
  // "quick: 3 files match (0 hashed)", "full: ...", "forced: <file>: <why>; ..." or
  // "not recorded in the case".
  std::string note(const WeightCheck& c) const;
  // Writes the fresh "stat:<file>" records of files that were hashed and still match, so the
  // next check of this case is quick again.
  static void refresh(CaseUpdate& u, const WeightCheck& c);
};

}  // namespace tdiff::app
