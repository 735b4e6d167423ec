// Report files on disk: the output folder and atomic writes.
#include <deque>
#include <filesystem>

#include "base/atomic_file.h"
#include "base/error.h"
#include "report/report.h"

namespace tdiff {

std::string report_dir(const RunInfo& info, const std::string& out_dir) {
  if (!out_dir.empty()) return out_dir;
  return (std::filesystem::path("reports") / info.case_name / info.run_id).string();
}

namespace {

namespace fs = std::filesystem;

// Creates the missing folders above a report folder; remembers which, so that a failed write
// removes them again (a report that could not be written leaves no empty folders behind).
struct NewParents {
  std::vector<fs::path> created;  // outermost first
  void make(const fs::path& dir) {
    std::vector<fs::path> missing;
    std::error_code ec;
    for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
      missing.push_back(p);
      if (p == p.parent_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (!fs::create_directory(*it, ec) && ec) input_error("cannot create report folder {}: {}", it->string(), ec.message());
      created.push_back(*it);
    }
  }
  void undo() {
    std::error_code ec;
    for (auto it = created.rbegin(); it != created.rend(); ++it) fs::remove(*it, ec);  // only if still empty
  }
};

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

// A new folder is written whole beside its place and renamed in (AtomicFolder); in an
// existing one (it may hold other files) each file is replaced whole, once all are written.
// Either way a full disk or an interruption leaves neither a half-written report nor an empty
// folder.
std::vector<std::string> write_report_files(const std::string& dir,
                                            const std::vector<std::pair<std::string, std::string>>& files) {
  const fs::path target = fs::absolute(dir).lexically_normal();
  NewParents parents;
  parents.make(target.parent_path());
  std::error_code ec;
  try {
    if (!fs::exists(target, ec)) {
      AtomicFolder folder(target.string());
      for (const auto& [name, content] : files)
        write_new_file((fs::path(folder.temp_path()) / name).string(), content, (fs::path(dir) / name).string());
      folder.commit();
    } else {
      if (!fs::is_directory(target, ec)) input_error("report folder {} is a file, not a folder", dir);
      std::deque<AtomicFile> written;
      for (const auto& [name, content] : files) written.emplace_back((target / name).string()).write(content);
      for (auto& f : written) f.commit();
    }
  } catch (const InputError&) {
    parents.undo();
    throw;
  }
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back((fs::path(dir) / f.first).string());
  return paths;
}

std::vector<std::string> write_reports(const std::string& dir, const CompareResult& r, const RunInfo& info) {
  return write_report_files(dir, {
                                     {"report.csv", render_csv(r)},
                                     {"report.json", render_json(r, info)},
                                     {"junit.xml", render_junit(r, info)},
                                     {"report.html", render_html(r, info)},
                                 });
}

}  // namespace tdiff
