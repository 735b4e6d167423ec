#pragma once
// The environment record of a run: enough to tell two runs' machines and builds apart when
// their results differ. Stored as string attributes of /env/<run-id> in the case file.
#include <atomic>
#include <future>
#include <memory>
#include <map>
#include <string>
#include <vector>

namespace tdiff {

struct EnvRecord {
  std::string tdiff_version;  // TDIFF_VERSION
  std::string git_commit;     // TDIFF_GIT_COMMIT
  std::string compiler;       // __VERSION__ of the compiler that built tdiff
  int omp_threads = 0;        // omp_get_max_threads()
  std::string hostname;
  std::string cpu_model;      // "model name" of /proc/cpuinfo
  int cpu_cores = 0;          // online logical CPUs
  std::string os;             // PRETTY_NAME of /etc/os-release ("Debian GNU/Linux 12 (bookworm)")
  std::string kernel;         // uname: "Linux 6.1.0-18-amd64 x86_64"
  std::string date_utc;       // ISO 8601, "2026-11-29T22:12:41Z"
  std::string command_line;   // shell-quoted argv
  std::string backend;        // "refcpu", "emu", "hip"
  std::string policy;         // numerics policy name or file
  // Backend-specific facts (GPU name and arch, driver, HIP/ROCm or CUDA version, ...; "gpu"
  // is "none" until a device backend fills it), the case's facts (add_case_facts) and the
  // expanded policy (policy_knobs, policy_stages: app/candidate.h candidate_env).
  std::map<std::string, std::string> extra;

  // Attribute name -> value; `extra` keys keep their names.
  std::map<std::string, std::string> to_attrs() const;
  static EnvRecord from_attrs(const std::map<std::string, std::string>& attrs);
};

// Captures this process's environment. `argv` empty: read from /proc/self/cmdline.
EnvRecord capture_env(const std::string& backend, const std::string& policy,
                      const std::vector<std::string>& argv = {});

// The case file's sha256 (its bytes now, before this command writes to it) and the model's:
// the sha256 of the weight files' checksums the case recorded, as `sha256sum` lists them
// ("<sha256>  <file>\n", sorted by file), so a huge checkpoint is not read again.
// `case_sha256` non-empty: the case's, hashed already (CaseHash).
void add_case_facts(EnvRecord& r, const std::string& case_path, const std::map<std::string, std::string>& weight_sha256,
                    const std::string& case_sha256 = "");
// The case file's sha256, computed on a thread of its own from construction on: a real-width
// case holds GBs of reference, and hashing them beside the run's work costs no wall time.
// Start it after the command's input checks (a failure waits for the hash to end).
class CaseHash {
 public:
  explicit CaseHash(const std::string& case_path);
  ~CaseHash();  // unless get() ran: stops the thread (a command that failed does not wait)
  CaseHash(const CaseHash&) = delete;
  CaseHash& operator=(const CaseHash&) = delete;
  std::string get();  // waits; rethrows a read error

 private:
  std::shared_ptr<std::atomic<bool>> stop_;
  std::future<std::string> f_;
};
// The sha256 of a weight-checksum list as add_case_facts records it ("none recorded" when empty).
std::string model_sha256(const std::map<std::string, std::string>& weight_sha256);

// Quotes an argument so that a printed command line can be pasted into a shell.
std::string shell_quote(const std::string& arg);

// This process's command line, from /proc/self/cmdline (empty where that does not exist).
std::vector<std::string> process_command_line();

// A run id that sorts by time and does not collide: "<prefix>-20261129T221241Z-3fa2".
std::string make_run_id(const std::string& prefix);

}  // namespace tdiff
