#pragma once
// safetensors: reader (memory-mapped, lazy, header validated) and atomic writer.
// Format: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}},
// then the data block; offsets are relative to the data block.
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/tensor.h"

namespace tdiff {

struct TensorInfo {
  std::string name;
  DType dtype;
  std::string format;  // the file's dtype name ("BF16", "F8_E8M0", "I8", ...): u8 holds the last two
  Shape shape;
  std::size_t begin = 0, end = 0;  // byte range inside the data block
};

class SafetensorsFile {
 public:
  // Maps the file and validates the header: JSON well formed, every dtype known, every
  // shape's byte size equal to its range, ranges in bounds and not overlapping.
  // Throws InputError naming the file and the tensor.
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return infos_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  // A view into the mapping (no copy); the mapping stays alive while the view does.
  Tensor tensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Drops this process's resident pages of the mapping (they stay in the page cache and come
  // back on the next read), so the weights a run has read do not count in its resident memory.
  void release_pages() const;
  // Where [p, p + bytes) lies in the file, when it lies wholly inside this file's mapping: the
  // byte offset from the file's start, to pread the same bytes from fd().
  std::optional<std::uint64_t> file_offset(const void* p, std::size_t bytes) const;
  // The mapped file, open for reading while this object lives (the same inode as the mapping,
  // whatever has been renamed over the path since).
  int fd() const { return *fd_; }

 private:
  std::string path_;
  std::shared_ptr<void> mapping_;  // unmaps on release
  std::shared_ptr<int> fd_;         // closes on release
  std::uint64_t mapped_bytes_ = 0;
  const std::byte* data_ = nullptr;
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

// Drops this process's resident pages that lie wholly inside [begin, begin + bytes) of a
// mapped file (a no-op elsewhere): for weights read once per stage (a tile of the routed
// experts, converted and dropped), so a layer's experts are never all resident at once.
void release_resident_pages(const void* begin, std::size_t bytes);

// A model folder in the HF layout: model.safetensors, or shards listed by
// model.safetensors.index.json ({"weight_map": {name: file}}).
class ModelWeights {
 public:
  explicit ModelWeights(const std::string& dir);
  const std::string& dir() const { return dir_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  Tensor tensor(const std::string& name) const;
  std::vector<std::string> names() const;
  std::vector<std::string> files() const;  // file paths of the shards, sorted
  void release_pages() const;              // of every shard (SafetensorsFile::release_pages)
  // The shard and file offset of mapped bytes [p, p + bytes) (a view from tensor() or a part of
  // one); none when they are not wholly inside one shard's mapping.
  struct FileSpan {
    int fd;
    const std::string& path;
    std::uint64_t offset;
  };
  std::optional<FileSpan> locate(const void* p, std::size_t bytes) const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::size_t> where_;  // tensor name -> index into files_
};

// Writes a safetensors file atomically (an AtomicFile: base/atomic_file.h).
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A safetensors file written in pieces at known offsets, for tensors larger than memory and for
// writers on many threads: the header comes from the declared entries (dtype by its safetensors
// name, so F8_E8M0 and I8 can be written too), then each tensor's bytes go to data_offset(i) +
// any offset within it (write() is thread-safe). Same layout as write_safetensors: entries in
// name order, header padded with spaces to 8 bytes. `path` is created (or truncated) directly:
// callers write into a temporary folder and rename it (synth/synth.h).
class SafetensorsStream {
 public:
  struct Entry {
    std::string name;
    std::string dtype;  // "BF16", "F8_E4M3", "F8_E8M0", "I8", ...
    Shape shape;
    std::uint64_t bytes = 0;
  };
  SafetensorsStream(const std::string& path, std::vector<Entry> entries, const std::map<std::string, std::string>& metadata);
  ~SafetensorsStream();
  SafetensorsStream(const SafetensorsStream&) = delete;
  SafetensorsStream& operator=(const SafetensorsStream&) = delete;
  const std::vector<Entry>& entries() const { return entries_; }  // name order
  // File offset of entry i's data.
  std::uint64_t data_offset(std::size_t i) const { return offsets_[i]; }
  std::size_t index(const std::string& name) const;
  void write(std::uint64_t file_offset, const void* data, std::size_t n);
  void close();  // fsync and close; the destructor closes without syncing

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<Entry> entries_;
  std::vector<std::uint64_t> offsets_;
};


}  // namespace tdiff
