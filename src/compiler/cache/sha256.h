#pragma once
// SHA-256 (FIPS 180-4), small and dependency-free. Used for the compiled-module
// cache: the cache key and the integrity check of disk entries. Not constant-time;
// nothing secret is hashed.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::compiler {

using Sha256Digest = std::array<std::uint8_t, 32>;

// Incremental hashing: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  void update(std::string_view data) { update(data.data(), data.size()); }
  // The digest of everything passed to update(). The object must not be used afterwards.
  Sha256Digest finish();

 private:
  void compress(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_;
  std::size_t buffered_ = 0;  // bytes in buffer_
  std::uint64_t length_ = 0;  // total bytes hashed
};

Sha256Digest sha256(std::string_view data);

// Lower-case hexadecimal, 64 characters.
std::string to_hex(const Sha256Digest& digest);

}  // namespace kiln::compiler
