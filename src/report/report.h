#pragma once
// Reports of a compared run (diff/compare.h): a terminal table, report.csv, report.json,
// junit.xml and a self-contained report.html. Every file is written atomically.
//
//   RunInfo info{.case_name = "tiny", .run_id = id, .command = "tdiff run ...", ...};
//   print_terminal(stdout, result, info);
//   write_reports(report_dir(info, ""), result, info);
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "diff/compare.h"

namespace tdiff {

struct RunInfo {
  std::string case_name = "compare";  // reports/<case_name>/<run_id>/
  std::string run_id;
  std::string title;                  // headline of the HTML page
  std::string command;                // the exact command that reproduces the run
  std::vector<std::pair<std::string, std::string>> env;  // environment record, in display order
  std::string stats_html;  // report.html's model statistics section (render_stats_html); empty: none
  // Where the run's time went up to writing the reports (base/timing.h), in seconds per
  // phase; report.json's "timing_s" (absent when empty).
  std::vector<std::pair<std::string, double>> timing;
};

// `out_dir` if not empty, else reports/<case>/<run-id>.
std::string report_dir(const RunInfo& info, const std::string& out_dir);

// Writes report.csv, report.json, junit.xml and report.html into `dir` (created if needed);
// returns the paths written.
std::vector<std::string> write_reports(const std::string& dir, const CompareResult& r, const RunInfo& info);

// Writes `content` to a temporary file beside `path` and renames it over `path`.
void write_file_atomic(const std::string& path, const std::string& content);
// Creates `dir` (InputError when it cannot) and writes each (file name, content) into it
// atomically; returns the paths written.
std::vector<std::string> write_report_files(const std::string& dir,
                                            const std::vector<std::pair<std::string, std::string>>& files);

// One row per tensor; the header starts "stage,tensor,cosine,max_abs,rmse,rel_l2,verdict"
// (stable for users' scripts), the other metrics follow, max_abs_scaled first. Tensors present on one side only
// are rows with verdict MISSING.
std::string render_csv(const CompareResult& r);
std::string render_json(const CompareResult& r, const RunInfo& info);
// One testcase per stage (its worst tensor decides); WARN passes with a note in system-out.
std::string render_junit(const CompareResult& r, const RunInfo& info);
std::string render_html(const CompareResult& r, const RunInfo& info);

struct TerminalOptions {
  bool color = false;    // ANSI verdict colours (callers pass isatty(fileno(out)))
  bool all_rows = false; // otherwise big runs show only non-PASS rows and one line per layer
  int max_rows = 60;     // runs up to this many tensors are always shown in full
  int width = 100;
};
void print_terminal(std::FILE* out, const CompareResult& r, const RunInfo& info, const TerminalOptions& opt = {});
// Colour only for a terminal, and never with NO_COLOR set (no-color.org).
bool want_color(std::FILE* out);

}  // namespace tdiff
