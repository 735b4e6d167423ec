// Report files on disk: the output folder and atomic writes.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "base/temp_files.h"
#include "report/report.h"

namespace tdiff {

std::string report_dir(const RunInfo& info, const std::string& out_dir) {
  if (!out_dir.empty()) return out_dir;
  return (std::filesystem::path("reports") / info.case_name / info.run_id).string();
}

namespace {

namespace fs = std::filesystem;

// Writes `content` to a new file (fsync'd); an InputError with the system's reason names `shown`.
void write_new_file(const std::string& path, const std::string& content, const std::string& shown) {
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) input_error("cannot write {} ({})", shown, std::strerror(errno));
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      input_error("cannot write {} ({})", shown, std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  const bool ok = ::fsync(fd) == 0 || errno == EINVAL;  // EINVAL: a special file that cannot sync
  const int err = errno;
  if (::close(fd) != 0 || !ok) input_error("cannot write {} ({})", shown, std::strerror(ok ? errno : err));
}

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

// Moves the finished files from `tmp` to `dir`: one rename of the folder when `dir` is new,
// else one rename per file (each file is replaced whole, never half-written).
void move_into_place(const std::string& tmp, const std::string& dir,
                     const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::rename(tmp, dir, ec);
    if (ec) input_error("cannot rename {} to {}: {}", tmp, dir, ec.message());
    return;
  }
  if (!fs::is_directory(dir, ec)) input_error("report folder {} is a file, not a folder", dir);
  for (const auto& [name, content] : files) {
    fs::rename(fs::path(tmp) / name, fs::path(dir) / name, ec);
    if (ec) input_error("cannot rename {} into {}: {}", (fs::path(tmp) / name).string(), dir, ec.message());
  }
  fs::remove(tmp, ec);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  // Same folder as the target, so that the rename never crosses file systems.
  remove_stale_temps(path);
  const std::string tmp = temp_name(path);
  TempRegistration reg(tmp);
  try {
    write_new_file(tmp, content, path);
  } catch (const InputError&) {
    std::remove(tmp.c_str());
    throw;
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
  // Every file is written into a temporary folder beside `dir` first: a full disk or an
  // interruption leaves neither a half-written report nor an empty folder.
  const fs::path target = fs::absolute(dir).lexically_normal();
  NewParents parents;
  parents.make(target.parent_path());
  remove_stale_temps(target.string());
  const std::string tmp = temp_name(target.string());
  std::vector<TempRegistration> regs;
  regs.emplace_back(tmp);
  std::error_code ec;
  try {
    if (!fs::create_directory(tmp, ec)) input_error("cannot create report folder {}: {}", dir, ec.message());
    for (const auto& [name, content] : files) {
      regs.emplace_back((fs::path(tmp) / name).string());
      write_new_file((fs::path(tmp) / name).string(), content, (fs::path(dir) / name).string());
    }
    move_into_place(tmp, target.string(), files);
  } catch (const InputError&) {
    fs::remove_all(tmp, ec);
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
