#include "casefile/env_record.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <omp.h>

#include "base/sha256.h"
#include "base/version.h"

namespace tdiff {

namespace {

// Fixed attribute names of the record; everything else read back lands in `extra`.
constexpr const char* kFields[] = {"tdiff_version", "git_commit", "compiler", "omp_threads", "hostname",
                                   "cpu_model",     "cpu_cores",  "os",           "kernel",  "date_utc",
                                   "command_line",  "backend",    "policy"};

std::string utc_now(const char* format) {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) break;
    auto v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    return v;
  }
  return "unknown";
}

// PRETTY_NAME of os-release, else NAME VERSION_ID; values may be quoted.
std::string os_name() {
  std::ifstream in("/etc/os-release");
  std::map<std::string, std::string> kv;
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string v = line.substr(eq + 1);
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
    kv[line.substr(0, eq)] = v;
  }
  if (!kv["PRETTY_NAME"].empty()) return kv["PRETTY_NAME"];
  if (!kv["NAME"].empty()) return kv["NAME"] + (kv["VERSION_ID"].empty() ? "" : " " + kv["VERSION_ID"]);
  return "unknown";
}

std::string kernel_name() {
  utsname u{};
  if (uname(&u) != 0) return "unknown";
  return fmt::format("{} {} {}", u.sysname, u.release, u.machine);
}

}  // namespace

std::string model_sha256(const std::map<std::string, std::string>& weight_sha256) {
  if (weight_sha256.empty()) return "none recorded";
  std::string list;
  for (const auto& [file, sum] : weight_sha256) list += sum + "  " + file + "\n";
  return bytes_sha256(list);
}

void add_case_facts(EnvRecord& r, const std::string& case_path, const std::map<std::string, std::string>& weight_sha256,
                    const std::string& case_sha256) {
  r.extra["case_sha256"] = case_sha256.empty() ? file_sha256(case_path) : case_sha256;
  r.extra["model_sha256"] = model_sha256(weight_sha256);
  r.extra["model_files"] = std::to_string(weight_sha256.size());
}

CaseHash::CaseHash(const std::string& case_path)
    : stop_(std::make_shared<std::atomic<bool>>(false)),
      f_(std::async(std::launch::async, [case_path, stop = stop_] { return file_sha256(case_path, stop.get()); })) {}

CaseHash::~CaseHash() {
  if (f_.valid()) *stop_ = true;  // the future's destructor then waits only for the current MiB
}

std::string CaseHash::get() { return f_.get(); }

std::string shell_quote(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
                        std::string::npos)
    return a;
  std::string out = "'";
  for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::map<std::string, std::string> EnvRecord::to_attrs() const {
  std::map<std::string, std::string> a = extra;
  a["tdiff_version"] = tdiff_version;
  a["git_commit"] = git_commit;
  a["compiler"] = compiler;
  a["omp_threads"] = std::to_string(omp_threads);
  a["hostname"] = hostname;
  a["cpu_model"] = cpu_model;
  a["cpu_cores"] = std::to_string(cpu_cores);
  a["os"] = os;
  a["kernel"] = kernel;
  a["date_utc"] = date_utc;
  a["command_line"] = command_line;
  a["backend"] = backend;
  a["policy"] = policy;
  return a;
}

EnvRecord EnvRecord::from_attrs(const std::map<std::string, std::string>& attrs) {
  EnvRecord r;
  auto get = [&](const char* k) {
    auto it = attrs.find(k);
    return it == attrs.end() ? std::string() : it->second;
  };
  r.tdiff_version = get("tdiff_version");
  r.git_commit = get("git_commit");
  r.compiler = get("compiler");
  try {
    r.omp_threads = std::stoi(get("omp_threads"));
  } catch (const std::exception&) {
    r.omp_threads = 0;
  }
  r.hostname = get("hostname");
  r.cpu_model = get("cpu_model");
  r.cpu_cores = std::atoi(get("cpu_cores").c_str());
  r.os = get("os");
  r.kernel = get("kernel");
  r.date_utc = get("date_utc");
  r.command_line = get("command_line");
  r.backend = get("backend");
  r.policy = get("policy");
  for (const auto& [k, v] : attrs) {
    bool fixed = false;
    for (const char* f : kFields) fixed = fixed || k == f;
    if (!fixed) r.extra[k] = v;
  }
  return r;
}

std::vector<std::string> process_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

EnvRecord capture_env(const std::string& backend, const std::string& policy, const std::vector<std::string>& argv) {
  EnvRecord r;
  r.tdiff_version = TDIFF_VERSION;
  r.git_commit = TDIFF_GIT_COMMIT;
#ifdef __VERSION__
  r.compiler = __VERSION__;
#else
  r.compiler = "unknown";
#endif
  r.omp_threads = omp_get_max_threads();
  char host[256] = {};
  r.hostname = gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  r.cpu_model = cpu_model();
  r.cpu_cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  r.os = os_name();
  r.kernel = kernel_name();
  r.extra["gpu"] = "none";  // a device backend's environment() replaces it
  if (backend == "refcpu") r.extra["policy_knobs"] = "none: refcpu computes every stage in float64";
  r.date_utc = utc_now("%Y-%m-%dT%H:%M:%SZ");
  for (const auto& a : argv.empty() ? process_command_line() : argv) {
    if (!r.command_line.empty()) r.command_line += ' ';
    r.command_line += shell_quote(a);
  }
  r.backend = backend;
  r.policy = policy;
  return r;
}

std::string make_run_id(const std::string& prefix) {
  std::random_device rd;
  return fmt::format("{}-{}-{:04x}", prefix, utc_now("%Y%m%dT%H%M%SZ"), rd() & 0xffff);
}

}  // namespace tdiff
