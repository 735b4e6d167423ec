#pragma once
// The envelope of every command that records or reports a run on a case (run, bisect,
// determinism, audit, compare, ci): its run id and its run seed (the environment record's case
// facts: casefile/env_record.h add_case_facts). One rule each, so a run id names the same seeds
// in every command.
#include <cstdint>
#include <string>

namespace tdiff::app {

// The run id a command reports and records under: `given`, or a new one for `command`
// ("run-20261203T...").
std::string run_id_for(const std::string& given, const std::string& command);

// The one seed rule: `given` (a --seed), or, when 0, a hash of the run id, so that repeating a
// run id repeats its atomic orders and unstable ties.
std::uint64_t run_seed_for(std::uint64_t given, const std::string& run_id);

}  // namespace tdiff::app
