#pragma once
// An engine tdiff runs itself (`--candidate-cmd 'CMD ...'`) as a candidate backend, so that
// bisect, determinism, run and ci drive any engine as they drive emu and hip.
//
// The engine is a process: for a mixed run tdiff writes a request (casefile/engine_request.h:
// the case, where to write the dump, the stages to take from the case's reference) and runs
// `sh -c CMD` with $TDIFF_REQUEST set ({request} in CMD is replaced by its path). The engine
// substitutes those stages' outputs with the reference's tensors (the tap's
// tdiff_tap_substitute, tdiff_capture's hooks) and dumps the rest; the dump is checked as any
// candidate dump (exec/candidate_dump.h), then serves the stages the mixed run puts on the
// candidate, as if computed. Before a mixed run, assign() says which stages those are: every
// reference stage before the last candidate stage is substituted; the stages after it are not
// read from the engine, so one dump per substitution set serves every split of a search (the
// whole prefix search of a bisect is one engine run, each culprit pinned one more). A stage
// alone on the engine after reference stages is that stage on the reference's inputs: one
// run in mode "isolated" serves them all (bisect --mode isolate, an inconclusive search's leads).
//
// What differs from a backend of tdiff's: a reference stage inside the candidate's prefix (a
// pinned culprit) gives the engine the reference's stored tensor, where tdiff's mixed run
// computes the reference's stage on the candidate's inputs; the engine's later stages then
// read the stored tensor. Its padding positions are the engine's own business: they are
// replaced by the reference's rows before anything reads them.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "casefile/engine_request.h"
#include "base/temp_files.h"
#include "casefile/session.h"
#include "numerics/policy.h"
#include "exec/candidate_dump.h"

namespace tdiff {

// A fresh folder under the system's temporary folder for an engine's requests, dumps and
// logs: removed with its owner, and on SIGINT/SIGTERM.
class EngineFolder {
 public:
  EngineFolder();
  ~EngineFolder();
  EngineFolder(const EngineFolder&) = delete;
  EngineFolder& operator=(const EngineFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  TempRegistration registration_;
};

class EngineBackend : public Backend {
 public:
  // `policy`: the formats the engine computes in, for the expected errors (kept as a copy).
  EngineBackend(std::string command, CaseSession& session, const Policy& policy, std::uint64_t seed);

  std::string name() const override { return "engine"; }
  bool implements(OpKind) const override { return true; }
  const Policy* policy() const override { return &policy_; }
  std::map<std::string, std::string> environment() const override { return env_; }
  void assign(const std::vector<bool>& on_candidate) override;
  std::vector<Tensor> run(const Stage& stage, const std::vector<const Tensor*>& inputs, RunContext& ctx) override;

  std::size_t invocations() const { return invocations_; }
  double seconds() const { return seconds_; }  // in the engine's processes

 private:
  // The dump of a run with these stages substituted (mode "run"), or the isolated run's.
  const CandidateDump& dump_for(const std::vector<std::string>& substitute, const std::string& mode);

  std::string command_;
  CaseSession& session_;
  Policy policy_;
  std::uint64_t seed_;
  EngineFolder folder_;  // the requests, dumps and logs of this backend's engine runs
  std::map<std::vector<std::string>, std::unique_ptr<CandidateDump>> dumps_;  // by substitution set
  std::unique_ptr<CandidateDump> isolated_;  // every stage on the reference's inputs (mode "isolated")
  const CandidateDump* current_ = nullptr;
  std::map<std::string, std::string> env_;  // the last dump's env.* (the engine's own record)
  std::size_t invocations_ = 0;
  double seconds_ = 0;
};

// `{request}` in `command` replaced by the shell-quoted `request` path.
std::string engine_command_line(const std::string& command, const std::string& request);

// Runs the engine once: writes `r` to `request_path`, runs `sh -c command` with $TDIFF_REQUEST
// set (stdout and stderr into r.dump_path + ".log") and checks that it exited 0 and wrote the
// dump; InputError naming the command and its last line of output otherwise. Returns seconds.
double run_engine(const std::string& command, const EngineRequest& r, const std::string& request_path);

}  // namespace tdiff
