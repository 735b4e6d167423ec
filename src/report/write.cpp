// Report files on disk: the output folder and atomic writes.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "report/report.h"

namespace tdiff {

std::string report_dir(const RunInfo& info, const std::string& out_dir) {
  if (!out_dir.empty()) return out_dir;
  return (std::filesystem::path("reports") / info.case_name / info.run_id).string();
}

void write_file_atomic(const std::string& path, const std::string& content) {
  // Same folder as the target, so that the rename never crosses file systems.
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) input_error("cannot write {}", tmp);
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      input_error("cannot write {} (disk full?)", tmp);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    input_error("cannot rename {} to {}: {}", tmp, path, ec.message());
  }
}

std::vector<std::string> write_report_files(const std::string& dir,
                                            const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) input_error("cannot create report folder {}: {}", dir, ec.message());
  std::vector<std::string> paths;
  for (const auto& [name, content] : files) {
    paths.push_back((std::filesystem::path(dir) / name).string());
    write_file_atomic(paths.back(), content);
  }
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
