#pragma once
// The envelope of every command that records or reports a run on a case (run, bisect,
// determinism, audit, compare, ci): its run id, its run seed, and its environment record
// completed with the case's facts and shown in the report. One rule each, so a run id names the
// same seeds in every command and every report carries the same facts.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "casefile/env_record.h"
#include "report/report.h"

namespace tdiff::app {

// The run id a command reports and records under: `given` (--run-id), or a new one for
// `command` ("run-20261203T..."). A given id must be a safe name (is_safe_run_id), else an
// InputError naming --run-id.
std::string run_id_for(const std::string& given, const std::string& command);

// A run id names a folder (reports/<case>/<run-id>) and case groups (/runs/<run-id>,
// /env/<run-id>), so it is one plain name: 1 to 128 letters, digits, '-', '_' and '.', the
// first a letter or a digit, no "..". Anything else could leave reports/ ("../../x"), nest
// groups ("a/b") or hide a folder (".x").
bool is_safe_run_id(const std::string& id);
// InputError unless `id` is safe: `<where> "<id>" is not a plain name (...)`, `where` saying
// whose it is ("--run-id", "<suite.toml>: name"). Held to it: every id that becomes a path
// (--run-id, compare's --case, a suite's name).
void check_run_id(const std::string& id, const std::string& where);
// An id read back from a case, as a listing shows it: itself when safe, else quoted with its
// control characters escaped, so that it cannot move the cursor or forge a line. Cases written
// by earlier tdiff versions may hold such ids ("nightly 1"), so they are shown, not refused.
std::string shown_run_id(const std::string& id);

// The one seed rule: `given` (a --seed), or, when 0, a hash of the run id, so that repeating a
// run id repeats its atomic orders and unstable ties.
std::uint64_t run_seed_for(std::uint64_t given, const std::string& run_id);

// `env` completed with the case's facts (add_case_facts: its checksum, `case_sha256` when hashed
// already, and the weight checksums it records) and the run seed when the command has one.
void add_run_facts(EnvRecord& env, const std::string& case_path, const std::map<std::string, std::string>& weight_sha256,
                   std::optional<std::uint64_t> seed, const std::string& case_sha256 = "");

// The record as the report's environment table.
void show_env(const EnvRecord& env, RunInfo& info);

}  // namespace tdiff::app
