#pragma once
// The model statistics of checks/model_stats.h as a terminal table, stats.csv, stats.json and an
// HTML section of tdiff run's report.html (stats_html.cpp).
#include <cstdio>
#include <string>

#include "checks/model_stats.h"

namespace tdiff {

void print_stats(std::FILE* out, const ModelStats& m);
// One row per layer; the columns are the fields of LayerStats, NaN/empty where undefined.
std::string render_stats_csv(const ModelStats& m);
std::string render_stats_json(const ModelStats& m);
// A <section> for report.html: the table, and what each column means.
std::string render_stats_html(const ModelStats& m);

}  // namespace tdiff
