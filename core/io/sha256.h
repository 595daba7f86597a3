// SHA-256 digests of input files, recorded in result files so that a result names the exact bytes
// it was computed from (FIPS 180-4, computed by OpenSSL's EVP interface).
#pragma once

#include <string>

namespace statecheck {

// SHA-256 of the whole file at `path` as 64 lowercase hex digits. Reads the file in 1 MiB blocks.
// Throws statecheck::Error naming the file when it cannot be opened or read.
std::string file_sha256(const std::string& path);

// SHA-256 of `bytes` as 64 lowercase hex digits (the same digest, for data in memory).
std::string sha256_hex(const std::string& bytes);

}  // namespace statecheck
