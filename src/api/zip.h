#pragma once
// The part of the zip format .npz files use: writing uncompressed ("stored")
// entries, and reading stored entries and, with zlib, deflated ones. No
// Zip64, encryption or multi-part archives: those are refused with an IOError.

#include "api/file_access.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln::detail {

// The CRC-32 that zip (and PNG, gzip) uses, of `bytes` continued from `crc`
// (0 to start), so that the CRC of pieces can be computed one after another.
std::uint32_t crc32(std::span<const unsigned char> bytes, std::uint32_t crc = 0);

// One file of a zip to write: its name and its contents, the concatenation of
// `pieces` (so that a tensor's data is written from its own buffer).
struct ZipEntry {
  std::string name;
  std::vector<std::span<const unsigned char>> pieces;
};

// Writes `entries` in order as an uncompressed zip, dated 1980-01-01 so that
// the same tensors always give the same bytes. Throws a ValueError before
// writing anything when the zip would need Zip64 (an entry or offset of
// 4 GiB, 65535 entries).
void write_zip(OutputFile& file, const std::vector<ZipEntry>& entries, const FileOperation& operation);

// What the central directory says about one entry.
struct ZipEntryInfo {
  std::string name;
  std::uint16_t method = 0;  // 0 stored, 8 deflated
  std::uint32_t crc = 0;
  std::uint64_t compressed_bytes = 0;
  std::uint64_t bytes = 0;
  std::uint64_t local_header_offset = 0;
};

// Reads a zip's central directory, then its entries on request.
class ZipReader {
 public:
  // Throws an IOError naming `operation` when the file is not a zip kiln reads.
  ZipReader(InputFile& file, const FileOperation& operation);

  // In the order of the central directory.
  const std::vector<ZipEntryInfo>& entries() const { return entries_; }
  // The contents of `entry`, inflated when deflated, their CRC checked;
  // errors name `operation`, which says which entry it is.
  std::string read(const ZipEntryInfo& entry, const FileOperation& operation);

 private:
  InputFile& file_;
  std::uint64_t central_directory_offset_ = 0;
  std::vector<ZipEntryInfo> entries_;
};

// True when kiln was built with zlib and ZipReader inflates deflated entries.
bool zip_reads_deflated();

}  // namespace kiln::detail
