#pragma once
// Reports of a precision audit (checks/audit.h): the terminal table (100 columns), audit.csv
// (one row per knob), audit.json (rows and every touched tensor) and a self-contained
// audit.html. Every file is written atomically.
#include <cstdio>
#include <string>
#include <vector>

#include "checks/audit.h"
#include "report/report.h"

namespace tdiff {

// "1.2e-03", "3 tok", "inf", "NaN/Inf" for a side's local error.
std::string audit_local_text(const AuditSide& side, bool selection);
std::string audit_factor_text(double factor);  // "12.3x", "inf", "1.00x"
std::string audit_paper_text(const KnobInfo& knob);  // "~10x", "" where the paper has no number
// Whether any knob ran the full (end-to-end, run-to-run) runs: the reports show those columns only then.
bool audit_ran_full(const AuditResult& r);

void print_audit(std::FILE* out, const AuditResult& r, const RunInfo& info);
std::string render_audit_csv(const AuditResult& r);
std::string render_audit_json(const AuditResult& r, const RunInfo& info);
std::string render_audit_html(const AuditResult& r, const RunInfo& info);
// Writes audit.csv, audit.json and audit.html into `dir`; returns the paths written.
std::vector<std::string> write_audit_reports(const std::string& dir, const AuditResult& r, const RunInfo& info);

}  // namespace tdiff
