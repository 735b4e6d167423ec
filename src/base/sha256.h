#pragma once
// SHA-256 (OpenSSL's EVP), lowercase hex: the one hash of weight files, case files and dumps.
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

struct evp_md_ctx_st;

namespace tdiff {

// Fed in pieces; hex() ends it.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void add(const void* data, std::size_t n);
  std::string hex();

 private:
  evp_md_ctx_st* ctx_;
};

// SHA-256 of a file. `stop` set while hashing: returns "" at once (a command that fails does not
// wait for it). `on_read`, when set, is told the bytes of each piece read (progress of a long
// hash). InputError naming the file when it cannot be read.
std::string file_sha256(const std::string& path, const std::atomic<bool>* stop = nullptr,
                        const std::function<void(std::size_t)>& on_read = {});
// SHA-256 of bytes in memory.
std::string bytes_sha256(const std::string& data);

}  // namespace tdiff
