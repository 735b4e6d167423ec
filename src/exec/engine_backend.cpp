#include "exec/engine_backend.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "base/temp_files.h"
#include "casefile/engine_request.h"
#include "casefile/stored_tensor.h"
#include "diff/real_rows.h"
#include "model/op_table.h"

extern char** environ;  // POSIX: the process's environment, handed on to the engine

namespace tdiff {

namespace fs = std::filesystem;

namespace {

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The last non-empty line of `log`, for a message.
std::string last_line(const std::string& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last.empty() ? "no output" : last;
}

// Runs `sh -c line` with $TDIFF_REQUEST = request, stdout and stderr into `log`; its wait
// status. posix_spawn: nothing runs between the fork and the exec but the spawn's own file
// actions (tdiff has OpenMP threads, and a forked child of a threaded process may only call
// async-signal-safe functions).
int run_shell(const std::string& line, const std::string& request, const std::string& log) {
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e)
    if (std::string_view(*e).substr(0, std::strlen(kEngineRequestEnv) + 1) != std::string(kEngineRequestEnv) + "=")
      env_text.emplace_back(*e);
  env_text.push_back(std::string(kEngineRequestEnv) + "=" + request);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string sh = "sh", dash_c = "-c", cmd = line;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) input_error("--candidate-cmd: cannot start /bin/sh ({})", std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) input_error("--candidate-cmd: lost the engine's process ({})", std::strerror(errno));
  return status;
}

}  // namespace

std::string engine_command_line(const std::string& command, const std::string& request) {
  std::string out = command;
  for (std::size_t at = out.find("{request}"); at != std::string::npos; at = out.find("{request}", at)) {
    out.replace(at, 9, quoted(request));
    at += quoted(request).size();
  }
  return out;
}

EngineFolder::EngineFolder() {
  std::string pattern = (fs::temp_directory_path() / "tdiff-engine-XXXXXX").string();
  if (!mkdtemp(pattern.data()))
    input_error("--candidate-cmd: cannot make a folder in {} ({})", fs::temp_directory_path().string(),
                std::strerror(errno));
  path_ = pattern;
  registration_ = TempRegistration(path_);
}

EngineFolder::~EngineFolder() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

EngineBackend::EngineBackend(std::string command, CaseSession& session, const Policy& policy, std::uint64_t seed)
    : command_(std::move(command)), session_(session), policy_(policy), seed_(seed) {
  if (command_.find_first_not_of(" \t") == std::string::npos) input_error("--candidate-cmd: an empty command");
}

double run_engine(const std::string& command, const EngineRequest& r, const std::string& request_path) {
  write_engine_request(request_path, r);
  const std::string log = r.dump_path + ".log";
  const auto t0 = std::chrono::steady_clock::now();
  const int status = run_shell(engine_command_line(command, request_path), request_path, log);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (WIFSIGNALED(status))
    input_error("--candidate-cmd '{}': the engine died of signal {} ({})", command, WTERMSIG(status), last_line(log));
  if (WEXITSTATUS(status) != 0)
    input_error("--candidate-cmd '{}': the engine exited {} ({})", command, WEXITSTATUS(status), last_line(log));
  if (!fs::exists(r.dump_path))
    input_error("--candidate-cmd '{}': the engine wrote no dump at the request's path ({})", command, last_line(log));
  return seconds;
}

const CandidateDump& EngineBackend::dump_for(const std::vector<std::string>& substitute, const std::string& mode) {
  auto& slot = mode == "isolated" ? isolated_ : dumps_[substitute];
  if (slot) return *slot;
  const std::string n = std::to_string(invocations_ + 1);
  EngineRequest r;
  r.case_path = fs::absolute(session_.path).string();
  r.dump_path = folder_.path() + "/dump-" + n + ".h5";
  r.mode = mode;
  r.substitute = substitute;
  r.seed = seed_;
  seconds_ += run_engine(command_, r, folder_.path() + "/request-" + n + ".json");
  ++invocations_;
  slot = std::make_unique<CandidateDump>(open_candidate_dump(session_.path, session_.stages, r.dump_path));
  env_ = slot->env;
  return *slot;
}

void EngineBackend::assign(const std::vector<bool>& on_candidate) {
  std::size_t last = on_candidate.size();
  for (std::size_t i = 0; i < on_candidate.size(); ++i)
    if (on_candidate[i]) last = i;
  current_ = nullptr;
  if (last == on_candidate.size()) return;  // nothing on the engine
  // One stage on the engine and every one before it on the reference: that stage on the
  // reference's inputs, which one isolated run of the engine gives for every stage at once.
  if (last > 0 && std::count(on_candidate.begin(), on_candidate.end(), true) == 1) {
    current_ = &dump_for({}, "isolated");
    return;
  }
  std::vector<std::string> substitute;
  for (std::size_t i = 0; i < last; ++i)
    if (!on_candidate[i]) substitute.push_back(session_.stages[i].name);
  current_ = &dump_for(substitute, "run");
}

std::vector<Tensor> EngineBackend::run(const Stage& stage, const std::vector<const Tensor*>&, RunContext&) {
  if (!current_) assign(std::vector<bool>(session_.stages.size(), true));
  const CandidateDump& d = *current_;
  const Batch& batch = session_.info.batch;
  std::vector<Tensor> out;
  for (const auto& name : stage.outputs) {
    const std::string key = stage.name + "/" + name;
    if (std::find(d.keys.begin(), d.keys.end(), key) == d.keys.end())
      input_error("--candidate-cmd '{}': its dump {} lacks {}, which this run puts on the engine", command_, d.path, key);
    Tensor t = read_stage_tensor(*d.file, d.group, key, *d.contract, StoredBy::dump);
    const bool have_ref = session_.reference().has(stage.name, name);
    const Tensor ref = have_ref ? session_.reference().get(stage.name, name) : Tensor();
    const TensorSpec& spec = *d.contract->find(key);
    const DType as = have_ref                              ? ref.dtype()
                     : spec.value == ValueClass::floating ? DType::f64
                     : spec.value == ValueClass::index    ? DType::i64
                                                          : DType::boolean;
    t = t.to(as);
    // Padding positions: the reference's rows, whatever the engine left there.
    const RealRows rows = real_rows(t.shape(), batch, real_rows_rate(stage, session_.info.config));
    if (have_ref && rows.count() < rows.rows) {
      const std::size_t bytes = static_cast<std::size_t>(rows.row_size) * dtype_size(t.dtype());
      for (std::int64_t r = 0; r < rows.rows; ++r)
        if (!rows.real[static_cast<std::size_t>(r)])
          std::memcpy(t.raw() + static_cast<std::size_t>(r) * bytes, ref.raw() + static_cast<std::size_t>(r) * bytes, bytes);
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace tdiff
