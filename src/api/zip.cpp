#include "api/zip.h"

#include <algorithm>
#include <array>
#include <limits>

#if KILN_HAVE_ZLIB
#include <zlib.h>
#endif

namespace kiln::detail {
namespace {

// Signatures of the zip records (APPNOTE.TXT, section 4.3), little-endian.
constexpr std::uint32_t local_header_signature = 0x04034b50;
constexpr std::uint32_t central_header_signature = 0x02014b50;
constexpr std::uint32_t end_record_signature = 0x06054b50;
constexpr std::uint32_t zip64_locator_signature = 0x07064b50;
constexpr std::uint64_t local_header_bytes = 30;
constexpr std::uint64_t central_header_bytes = 46;
constexpr std::uint64_t end_record_bytes = 22;
constexpr std::uint64_t zip64_locator_bytes = 20;
constexpr std::uint64_t largest_comment = 0xffff;
// A 32-bit size or offset at its largest means "see the Zip64 record".
constexpr std::uint64_t zip32_limit = 0xffffffff;
constexpr std::uint16_t method_stored = 0;
constexpr std::uint16_t method_deflated = 8;
// Flag bit 0 marks an encrypted entry; bit 11 a UTF-8 name.
constexpr std::uint16_t flag_encrypted = 1;
constexpr std::uint16_t flag_utf8_name = 1 << 11;
// Version 2.0 of the format: what stored and deflated entries need.
constexpr std::uint16_t version_needed = 20;
// "Made by" Unix (the high byte), so that unzip gives the files mode 0644.
constexpr std::uint16_t version_made_by = 3 << 8 | version_needed;
constexpr std::uint32_t unix_file_mode = 0100644u << 16;
// 1980-01-01 00:00, the earliest date MS-DOS dates can hold.
constexpr std::uint16_t dos_date = 1 << 5 | 1;
// Deflate cannot shrink data more than about 1032 to 1: a larger claimed
// ratio is a corrupt or malicious entry, refused before allocating for it.
constexpr std::uint64_t deflate_largest_ratio = 1032;

constexpr std::array<std::uint32_t, 256> crc_table = [] {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t byte = 0; byte < 256; ++byte) {
    std::uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
    table[byte] = crc;
  }
  return table;
}();

void put16(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 2; ++i) out += static_cast<char>(value >> (8 * i) & 0xff);
}
void put32(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>(value >> (8 * i) & 0xff);
}

// Little-endian fields of a record held in memory.
std::uint32_t get16(const unsigned char* at) { return static_cast<std::uint32_t>(at[0] | at[1] << 8); }
std::uint32_t get32(const unsigned char* at) { return get16(at) | get16(at + 2) << 16; }

bool is_ascii(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// The fields that the local and the central header of an entry share, from
// "version needed" to the lengths of the name and extra field.
std::string common_fields(const std::string& name, std::uint32_t crc, std::uint64_t bytes) {
  std::string out;
  put16(out, version_needed);
  put16(out, is_ascii(name) ? 0 : flag_utf8_name);
  put16(out, method_stored);
  put16(out, 0);  // time 00:00
  put16(out, dos_date);
  put32(out, crc);
  put32(out, bytes);  // compressed size: stored, the same
  put32(out, bytes);
  put16(out, name.size());
  put16(out, 0);  // no extra field
  return out;
}

void read_at(InputFile& file, std::uint64_t offset, void* destination, std::uint64_t bytes,
             const FileOperation& operation, const char* what) {
  file.stream.clear();
  file.stream.seekg(static_cast<std::streamoff>(offset));
  read_exactly(file.stream, destination, bytes, operation, what);
}

std::string inflate_entry(const std::string& compressed, std::uint64_t bytes, const FileOperation& operation) {
#if KILN_HAVE_ZLIB
  // One byte to spare: a stream that would give more than the directory says fills it.
  std::string out(bytes + 1, '\0');
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) operation.fail<IOError>("zlib cannot start inflating");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int status = inflate(&stream, Z_FINISH);
  const std::uint64_t produced = stream.total_out;
  inflateEnd(&stream);
  if (status != Z_STREAM_END || produced != bytes)
    operation.fail<IOError>("corrupt compressed data: inflating gave " + std::to_string(produced) +
                            " bytes where the zip directory says " + std::to_string(bytes));
  out.resize(bytes);
  return out;
#else
  (void)compressed;
  (void)bytes;
  operation.fail<IOError>(
      "the entry is compressed (numpy.savez_compressed), and this kiln was built without zlib, which reading it "
      "needs (install zlib1g-dev and rebuild kiln, or save with numpy.savez)");
#endif
}

}  // namespace

std::uint32_t crc32(std::span<const unsigned char> bytes, std::uint32_t crc) {
  crc = ~crc;
  for (unsigned char byte : bytes) crc = crc_table[(crc ^ byte) & 0xff] ^ (crc >> 8);
  return ~crc;
}

bool zip_reads_deflated() {
#if KILN_HAVE_ZLIB
  return true;
#else
  return false;
#endif
}

void write_zip(OutputFile& file, const std::vector<ZipEntry>& entries, const FileOperation& operation) {
  // Everything is sized first: a zip that would need Zip64 is refused before a byte is written.
  if (entries.size() >= 0xffff)
    operation.fail<ValueError>(std::to_string(entries.size()) + " entries need Zip64, which kiln does not write");
  std::vector<std::uint64_t> sizes, offsets;
  std::uint64_t offset = 0;
  for (const ZipEntry& entry : entries) {
    std::uint64_t bytes = 0;
    for (std::span<const unsigned char> piece : entry.pieces) bytes += piece.size();
    if (bytes >= zip32_limit || offset >= zip32_limit)
      operation.fail<ValueError>("entry '" + entry.name + "' (" + std::to_string(bytes) + " bytes at offset " +
                                 std::to_string(offset) +
                                 ") needs Zip64, which kiln does not write: zip entries and offsets stay under 4 GiB");
    sizes.push_back(bytes);
    offsets.push_back(offset);
    offset += local_header_bytes + entry.name.size() + bytes;
  }
  if (offset >= zip32_limit)
    operation.fail<ValueError>("the zip's directory would start at offset " + std::to_string(offset) +
                               ", which needs Zip64; kiln does not write it");

  std::string directory;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const ZipEntry& entry = entries[i];
    std::uint32_t crc = 0;
    for (std::span<const unsigned char> piece : entry.pieces) crc = crc32(piece, crc);
    const std::string common = common_fields(entry.name, crc, sizes[i]);
    std::string local;
    put32(local, local_header_signature);
    file.write(local + common + entry.name);
    for (std::span<const unsigned char> piece : entry.pieces) file.write(piece.data(), piece.size());

    put32(directory, central_header_signature);
    put16(directory, version_made_by);
    directory += common;
    put16(directory, 0);  // no comment
    put16(directory, 0);  // disk 0
    put16(directory, 0);  // internal attributes: binary
    put32(directory, unix_file_mode);
    put32(directory, offsets[i]);
    directory += entry.name;
  }
  std::string end;
  put32(end, end_record_signature);
  put16(end, 0);  // this disk
  put16(end, 0);  // the disk the directory starts on
  put16(end, entries.size());
  put16(end, entries.size());
  put32(end, directory.size());
  put32(end, offset);
  put16(end, 0);  // no comment
  file.write(directory + end);
}

ZipReader::ZipReader(InputFile& file, const FileOperation& operation) : file_(file) {
  // The end record is the last thing in the file, followed only by a comment of up to 64 KiB.
  const std::uint64_t tail_bytes = std::min(file.size, end_record_bytes + largest_comment);
  std::vector<unsigned char> tail(tail_bytes);
  read_at(file, file.size - tail_bytes, tail.data(), tail_bytes, operation, "the zip's end record");
  std::int64_t found = -1;
  for (std::int64_t at = static_cast<std::int64_t>(tail_bytes) - static_cast<std::int64_t>(end_record_bytes);
       at >= 0 && found < 0; --at) {
    const unsigned char* record = tail.data() + at;
    if (get32(record) == end_record_signature &&
        static_cast<std::uint64_t>(at) + end_record_bytes + get16(record + 20) <= tail_bytes)
      found = at;
  }
  if (found < 0) {
    const bool npy = tail_bytes >= 6 && std::string_view(reinterpret_cast<const char*>(tail.data()), 6) == "\x93NUMPY";
    operation.fail<IOError>(
        npy ? "not an .npz file: it is a single .npy array (read it with load_npy)"
            : "not an .npz file: it is not a zip archive, or a truncated one (no end of central directory record)");
  }
  const unsigned char* end = tail.data() + found;
  const std::uint64_t end_offset = file.size - tail_bytes + static_cast<std::uint64_t>(found);
  const std::uint32_t this_disk = get16(end + 4), directory_disk = get16(end + 6);
  const std::uint32_t disk_entries = get16(end + 8), total_entries = get16(end + 10);
  const std::uint64_t directory_bytes = get32(end + 12), directory_offset = get32(end + 16);
  const bool zip64_locator = end_offset >= zip64_locator_bytes &&
                             found >= static_cast<std::int64_t>(zip64_locator_bytes) &&
                             get32(end - zip64_locator_bytes) == zip64_locator_signature;
  if (zip64_locator || total_entries == 0xffff || directory_bytes == zip32_limit || directory_offset == zip32_limit)
    operation.fail<IOError>("the zip uses Zip64 (for archives of 4 GiB or 65535 entries), which kiln does not read");
  if (this_disk != 0 || directory_disk != 0 || disk_entries != total_entries)
    operation.fail<IOError>("the zip is split over several disks, which kiln does not read");
  if (directory_offset + directory_bytes > end_offset)
    operation.fail<IOError>("truncated or corrupt zip: its central directory (" + std::to_string(directory_bytes) +
                            " bytes at offset " + std::to_string(directory_offset) + ") lies past its end record");
  central_directory_offset_ = directory_offset;

  std::vector<unsigned char> directory(directory_bytes);
  read_at(file, directory_offset, directory.data(), directory_bytes, operation, "the zip's central directory");
  std::uint64_t at = 0;
  for (std::uint32_t i = 0; i < total_entries; ++i) {
    const unsigned char* header = directory.data() + at;
    if (at + central_header_bytes > directory_bytes || get32(header) != central_header_signature)
      operation.fail<IOError>("corrupt zip: central directory entry " + std::to_string(i) + " is malformed");
    const std::uint64_t name_bytes = get16(header + 28), extra_bytes = get16(header + 30),
                        comment_bytes = get16(header + 32);
    if (at + central_header_bytes + name_bytes + extra_bytes + comment_bytes > directory_bytes)
      operation.fail<IOError>("corrupt zip: central directory entry " + std::to_string(i) + " runs past the directory");
    ZipEntryInfo entry;
    entry.name.assign(reinterpret_cast<const char*>(header + central_header_bytes), name_bytes);
    const std::uint32_t flags = get16(header + 8);
    entry.method = static_cast<std::uint16_t>(get16(header + 10));
    entry.crc = get32(header + 16);
    entry.compressed_bytes = get32(header + 20);
    entry.bytes = get32(header + 24);
    entry.local_header_offset = get32(header + 42);
    if (entry.compressed_bytes == zip32_limit || entry.bytes == zip32_limit || entry.local_header_offset == zip32_limit)
      operation.fail<IOError>("entry '" + entry.name + "' uses Zip64 (an entry of 4 GiB), which kiln does not read");
    if (flags & flag_encrypted) operation.fail<IOError>("entry '" + entry.name + "' is encrypted");
    entries_.push_back(std::move(entry));
    at += central_header_bytes + name_bytes + extra_bytes + comment_bytes;
  }
}

std::string ZipReader::read(const ZipEntryInfo& entry, const FileOperation& operation) {
  if (entry.method != method_stored && entry.method != method_deflated)
    operation.fail<IOError>("compression method " + std::to_string(entry.method) +
                            " is not one kiln reads (0, stored, and 8, deflated)");
  if (entry.method == method_stored && entry.compressed_bytes != entry.bytes)
    operation.fail<IOError>("corrupt zip: a stored entry of " + std::to_string(entry.bytes) + " bytes takes " +
                            std::to_string(entry.compressed_bytes));
  if (entry.method == method_deflated && entry.bytes > entry.compressed_bytes * deflate_largest_ratio + 64)
    operation.fail<IOError>("corrupt zip: " + std::to_string(entry.compressed_bytes) +
                            " compressed bytes cannot inflate to the " + std::to_string(entry.bytes) + " claimed");
  // The local header repeats the name and may have another extra field (numpy
  // puts Zip64 sizes there); only their lengths matter, to find the data.
  unsigned char local[local_header_bytes];
  if (entry.local_header_offset + local_header_bytes > central_directory_offset_)
    operation.fail<IOError>("corrupt zip: the entry's header lies past the central directory");
  read_at(file_, entry.local_header_offset, local, local_header_bytes, operation, "a zip entry header");
  if (get32(local) != local_header_signature)
    operation.fail<IOError>("corrupt zip: no entry header at offset " + std::to_string(entry.local_header_offset));
  const std::uint64_t data_offset =
      entry.local_header_offset + local_header_bytes + get16(local + 26) + get16(local + 28);
  if (data_offset + entry.compressed_bytes > central_directory_offset_)
    operation.fail<IOError>("truncated or corrupt zip: the entry's " + std::to_string(entry.compressed_bytes) +
                            " bytes at offset " + std::to_string(data_offset) + " run into the central directory");
  std::string stored(entry.compressed_bytes, '\0');
  read_at(file_, data_offset, stored.data(), entry.compressed_bytes, operation, "a zip entry");
  std::string contents =
      entry.method == method_stored ? std::move(stored) : inflate_entry(stored, entry.bytes, operation);
  const std::uint32_t crc = crc32({reinterpret_cast<const unsigned char*>(contents.data()), contents.size()});
  if (crc != entry.crc)
    operation.fail<IOError>("corrupt zip: the entry's CRC-32 is " + std::to_string(crc) + ", the directory says " +
                            std::to_string(entry.crc));
  return contents;
}

}  // namespace kiln::detail
