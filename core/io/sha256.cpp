#include "core/io/sha256.h"

#include <fstream>
#include <memory>
#include <vector>

#include <openssl/evp.h>

#include "core/util/error.h"

namespace statecheck {

namespace {

struct DigestContext {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~DigestContext() { EVP_MD_CTX_free(ctx); }
};

std::string to_hex(const unsigned char* d, unsigned n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < n; ++i) {
    s.push_back(digits[d[i] >> 4]);
    s.push_back(digits[d[i] & 15]);
  }
  return s;
}

}  // namespace

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open file to compute its SHA-256", path);
  DigestContext c;
  if (!c.ctx || EVP_DigestInit_ex(c.ctx, EVP_sha256(), nullptr) != 1)
    fail("{}: cannot start a SHA-256 digest (OpenSSL)", path);
  std::vector<char> block(1 << 20);
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    const std::streamsize got = in.gcount();
    if (got > 0) EVP_DigestUpdate(c.ctx, block.data(), static_cast<size_t>(got));
  }
  if (in.bad()) fail("{}: read error while computing its SHA-256", path);
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (EVP_DigestFinal_ex(c.ctx, d, &n) != 1) fail("{}: SHA-256 digest failed (OpenSSL)", path);
  return to_hex(d, n);
}

std::string sha256_hex(const std::string& bytes) {
  DigestContext c;
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (!c.ctx || EVP_DigestInit_ex(c.ctx, EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(c.ctx, bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(c.ctx, d, &n) != 1)
    fail("SHA-256 digest failed (OpenSSL)");
  return to_hex(d, n);
}

}  // namespace statecheck
