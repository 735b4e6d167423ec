#include "base/sha256.h"

#include <fstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <openssl/evp.h>

#include "base/error.h"

namespace tdiff {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    throw std::runtime_error("OpenSSL: cannot initialise SHA-256");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::add(const void* data, std::size_t n) {
  if (n > 0 && EVP_DigestUpdate(ctx_, data, n) != 1) throw std::runtime_error("OpenSSL: SHA-256 update failed");
}

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  if (EVP_DigestFinal_ex(ctx_, md, &md_len) != 1) throw std::runtime_error("OpenSSL: SHA-256 final failed");
  std::string out;
  out.reserve(2 * md_len);
  for (unsigned int i = 0; i < md_len; ++i) out += fmt::format("{:02x}", md[i]);
  return out;
}

std::string file_sha256(const std::string& path, const std::atomic<bool>* stop,
                        const std::function<void(std::size_t)>& on_read) {
  std::ifstream in(path, std::ios::binary);
  if (!in) input_error("{}: cannot open for hashing", path);
  Sha256 sha;
  std::vector<char> buf(std::size_t{1} << 20);
  while (in) {
    if (stop && stop->load(std::memory_order_relaxed)) return "";
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    sha.add(buf.data(), static_cast<std::size_t>(in.gcount()));
    if (on_read && in.gcount() > 0) on_read(static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) input_error("{}: read error while hashing", path);
  return sha.hex();
}

std::string bytes_sha256(const std::string& data) {
  Sha256 sha;
  sha.add(data.data(), data.size());
  return sha.hex();
}

}  // namespace tdiff
