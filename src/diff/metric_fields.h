#pragma once
// The metrics of metrics.h as field tables: each row names a statistic, points at its member
// and says which reports show it, so report.csv's columns, report.json's keys and the HTML and
// terminal tables are loops over these rows (a new metric is one row here).
#include <cstdint>
#include <span>
#include <variant>

#include "diff/metrics.h"

namespace tdiff {

// Which reports show a field (bits).
enum MetricShow : unsigned {
  kShowFiles = 1,  // report.csv (when the field has a CSV column) and report.json
  kShowLead = 2,   // report.csv's leading columns, before the verdict (stable for users' scripts)
  kShowTable = 4,  // report.html's stage table
};

using MetricValue = std::variant<double, std::int64_t, bool>;

template <class Stats>
struct MetricField {
  const char* name;  // report.json key
  const char* csv;   // report.csv column; nullptr: not in report.csv
  std::variant<double Stats::*, std::int64_t Stats::*, bool Stats::*> member;
  unsigned show;

  MetricValue value(const Stats& s) const {
    return std::visit([&](auto m) { return MetricValue(s.*m); }, member);
  }
};

// In report.csv's order (each table's CSV columns are a contiguous run of the row).
std::span<const MetricField<TensorMetrics>> tensor_metric_fields();
std::span<const MetricField<LogitsMetrics>> logits_metric_fields();
std::span<const MetricField<RoutingMetrics>> routing_metric_fields();

}  // namespace tdiff
