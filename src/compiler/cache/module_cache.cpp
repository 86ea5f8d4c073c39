#include "compiler/cache/module_cache.h"

#include "compiler/cache/file_access.h"
#include "runtime/log.h"

#include <kiln/error.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <set>
#include <system_error>
#include <unordered_map>

namespace kiln::compiler {
namespace {

// ---- On-disk format (docs/cache.md) ----------------------------------------------------------------------
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'M', 'O', 'D', '1'};
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderSize = 88;  // magic 8, version 4, reserved 4, key 32, payload size 8, payload hash 32
constexpr std::uint64_t kDefaultModuleSizeLimit = std::uint64_t(1) << 30;
std::atomic<std::uint64_t> module_size_limit_bytes{kDefaultModuleSizeLimit};

void put_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += char((value >> (8 * i)) & 0xff);
}

std::uint64_t get_le(std::string_view in, std::size_t offset, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= std::uint64_t(std::uint8_t(in[offset + i])) << (8 * i);
  return value;
}

std::string encode_header(const Sha256Digest& key, std::string_view payload) {
  std::string header(kMagic, sizeof kMagic);
  put_le(header, kFormatVersion, 4);
  put_le(header, 0, 4);
  header.append(reinterpret_cast<const char*>(key.data()), key.size());
  put_le(header, payload.size(), 8);
  Sha256Digest hash = sha256(payload);
  header.append(reinterpret_cast<const char*>(hash.data()), hash.size());
  return header;
}

// Returns an empty string if `entry` (the whole file) is a well-formed entry for `key` whose payload matches
// its hash, else why not.
std::string check_entry(std::string_view entry, const Sha256Digest& key) {
  if (entry.size() < kHeaderSize) return "is too short to hold a header (" + std::to_string(entry.size()) + " bytes)";
  if (entry.substr(0, sizeof kMagic) != std::string_view(kMagic, sizeof kMagic))
    return "has a garbage header (wrong magic number)";
  if (std::uint64_t version = get_le(entry, 8, 4); version != kFormatVersion)
    return "has an unsupported format version " + std::to_string(version);
  if (get_le(entry, 12, 4) != 0) return "has a garbage header (reserved field not zero)";
  if (entry.substr(16, 32) != std::string_view(reinterpret_cast<const char*>(key.data()), key.size()))
    return "was written for a different key";
  std::uint64_t payload_size = get_le(entry, 48, 8);
  if (payload_size != entry.size() - kHeaderSize)
    return "is truncated or has trailing data (header says " + std::to_string(payload_size) +
           " payload bytes, the file holds " + std::to_string(entry.size() - kHeaderSize) + ")";
  Sha256Digest hash = sha256(entry.substr(kHeaderSize));
  if (entry.substr(56, 32) != std::string_view(reinterpret_cast<const char*>(hash.data()), hash.size()))
    return "has a wrong content hash";
  return {};
}

// ---- The cache directory ---------------------------------------------------------------------------------

// "cannot use the cache directory X (reason)", once per process per directory.
void warn_directory_once(const std::string& directory, const std::string& reason) {
  static std::mutex mutex;
  static std::set<std::string>* warned = new std::set<std::string>;
  {
    std::lock_guard lock(mutex);
    if (!warned->insert(directory).second) return;
  }
  runtime::warn("cannot use the cache directory " + directory + " (" + reason +
                "); compiled functions will not be cached on disk");
}

// Opens (creating it if needed) the cache directory and checks that only the current user can write to it.
// Returns an invalid descriptor (after a warning, once) if the disk cache cannot be used.
FileDescriptor open_cache_directory(const std::string& path) {
  if (path.empty()) return FileDescriptor();
  std::string problem;
  FileDescriptor directory = open_private_directory(path, problem);
  if (!directory.valid()) warn_directory_once(path, problem);
  return directory;
}

// ---- Reading and writing entries -------------------------------------------------------------------------

struct DiskRead {
  std::string payload;      // the entry's checked payload; empty when there is none to use
  bool found = false;       // an entry passed every check
  bool may_replace = true;  // false for an entry owned by another user: it is left alone
};

// Reads the entry for `key` if it exists and passes every check (docs/cache.md); warns about one that does not.
DiskRead read_entry(int directory, const std::string& directory_path, const std::string& file_name,
                    const Sha256Digest& key) {
  DiskRead read;
  std::string path = directory_path + "/" + file_name;
  auto reject = [&](const std::string& reason) {
    runtime::warn("cache entry " + path + " " + reason + "; rebuilding" +
                  (read.may_replace ? "" : " (the new build is kept in memory only)"));
    return read;
  };
  // O_NONBLOCK: never block opening a FIFO; it does not affect reading a regular file.
  FileDescriptor file(::openat(directory, file_name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (file.get() < 0) {
    if (errno == ENOENT) return read;
    if (errno == ELOOP) return reject("is a symbolic link");
    return reject("cannot be opened (" + error_text(errno) + ")");
  }
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) return reject("cannot be examined (" + error_text(errno) + ")");
  if (!S_ISREG(status.st_mode)) return reject("is not a regular file");
  if (status.st_uid != ::getuid()) {
    read.may_replace = false;
    return reject("is owned by uid " + std::to_string(status.st_uid) + ", not by the current user (uid " +
                  std::to_string(::getuid()) + ")");
  }
  if (status.st_mode & (S_IWGRP | S_IWOTH))
    return reject("is group- or world-writable (mode " + mode_text(status.st_mode) + ")");
  const std::uint64_t limit = kHeaderSize + module_size_limit();
  if (std::uint64_t(status.st_size) > limit) return reject("is too large");
  // The bytes checked are the bytes used: read once, verify, hand on from memory.
  FileContent entry = read_file(file.get(), limit);
  if (entry.error != 0) return reject("cannot be read (" + error_text(entry.error) + ")");
  if (!entry.complete) return reject("is too large");
  if (std::string problem = check_entry(entry.bytes, key); !problem.empty()) return reject(problem);
  read.payload = entry.bytes.substr(kHeaderSize);
  read.found = true;
  return read;
}

struct DiskLookup {
  std::shared_ptr<const LoadedModule> module;
  bool may_replace = true;  // false for an entry owned by another user: it is left alone
};

// Loads the entry for `key` if it exists, passes every check and loads.
DiskLookup load_entry(int directory, const std::string& directory_path, const std::string& file_name,
                      const Sha256Digest& key, const std::string& name) {
  DiskRead read = read_entry(directory, directory_path, file_name, key);
  DiskLookup lookup;
  lookup.may_replace = read.may_replace;
  if (!read.found) return lookup;
  try {
    lookup.module = LoadedModule::load(read.payload, name, to_hex(key));
  } catch (const CompileError& error) {
    runtime::warn("cache entry " + directory_path + "/" + file_name + " could not be loaded (" + error.detail() +
                  "); rebuilding");
  }
  return lookup;
}

// Atomically creates or replaces the entry: a new file in the same directory (O_EXCL, 0600), written, fsync'ed,
// then renamed over the entry. Readers see the old entry or the complete new one, never a partial one.
void store_entry(int directory, const std::string& directory_path, const std::string& file_name,
                 const Sha256Digest& key, std::string_view payload) {
  if (payload.size() > module_size_limit()) return;  // it could not be read back
  std::string problem = replace_file(directory, file_name, {encode_header(key, payload), payload},
                                     {.mode = 0600, .exact_mode = true, .sync = true});
  if (!problem.empty()) warn_directory_once(directory_path, problem);
}

// ---- Memory cache and the build of one key ---------------------------------------------------------------

using ModulePointer = std::shared_ptr<const LoadedModule>;

struct MemoryCache {
  std::mutex mutex;
  std::unordered_map<std::string, std::weak_ptr<const LoadedModule>> modules;
  std::unordered_map<std::string, std::shared_future<ModulePointer>> in_flight;  // key -> its running build
  std::size_t sweep_at = 64;  // drop expired entries when `modules` grows to this size
};

MemoryCache& memory_cache() {
  static MemoryCache* cache = new MemoryCache;  // never destroyed: modules may outlive static destruction
  return *cache;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Disk cache, else `compile`; called by one thread per key at a time.
BuildResult build_uncached(const Sha256Digest& key, const std::string& hex_key, const std::string& name,
                           const std::function<std::string()>& compile) {
  BuildResult result;
  result.key = hex_key;
  const std::string directory_path = cache_directory();
  FileDescriptor directory = open_cache_directory(directory_path);
  const std::string file_name = hex_key + ".kiln";
  bool may_store = directory.get() >= 0;
  if (directory.get() >= 0) {
    auto start = std::chrono::steady_clock::now();
    DiskLookup lookup = load_entry(directory.get(), directory_path, file_name, key, name);
    if (lookup.module) {
      runtime::log(LogLevel::info, "loaded " + name + " from the disk cache (" + directory_path + "/" + file_name +
                                       ", " + std::to_string(seconds_since(start)) + " s)");
      result.module = std::move(lookup.module);
      result.from_disk_cache = true;
      return result;
    }
    may_store = lookup.may_replace;
  }
  auto start = std::chrono::steady_clock::now();
  std::string shared_object = compile();
  result.compile_seconds = seconds_since(start);
  result.module = LoadedModule::load(shared_object, name, hex_key);
  runtime::log(LogLevel::info, "compiled " + name + " in " + std::to_string(result.compile_seconds) + " s (cache key " +
                                   hex_key.substr(0, 16) + ")");
  if (may_store) store_entry(directory.get(), directory_path, file_name, key, shared_object);
  return result;
}

// Drops `module`, cached under `hex_key`, from the memory cache and its entry from the disk cache: it lacks a
// symbol its user needs, so it must not be handed to the next build (in this process or another).
void forget_module(const std::string& hex_key, const LoadedModule* module) {
  MemoryCache& cache = memory_cache();
  {
    std::lock_guard lock(cache.mutex);
    if (auto found = cache.modules.find(hex_key); found != cache.modules.end()) {
      ModulePointer cached = found->second.lock();
      if (!cached || cached.get() == module) cache.modules.erase(found);
    }
  }
  std::string problem;
  FileDescriptor directory = open_private_directory(cache_directory(), problem);
  if (directory.valid() && ::unlinkat(directory.get(), (hex_key + ".kiln").c_str(), 0) == 0)
    runtime::log(LogLevel::info, "removed the cache entry of " + module->name() + " (key " + hex_key.substr(0, 16) +
                                     "): the module lacks a symbol it needs");
}

}  // namespace

// ---- LoadedModule ----------------------------------------------------------------------------------------

LoadedModule::LoadedModule(void* handle, int memory_file, std::string name, std::string cache_key)
    : handle_(handle), memory_file_(memory_file), name_(std::move(name)), cache_key_(std::move(cache_key)) {}

LoadedModule::~LoadedModule() {
  ::dlclose(handle_);
  if (memory_file_ < 0) return;
  // glibc cannot unload an object with a GNU unique symbol (a static local of
  // some libstdc++ templates is one, whatever the visibility flags): it stays
  // loaded under /proc/self/fd/N, and a later module given the same N would
  // be "found" already loaded -- dlopen would return this one. While it is
  // loaded, keep N taken (the descriptor is deliberately never closed).
  std::string path = "/proc/self/fd/" + std::to_string(memory_file_);
  if (void* still_loaded = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    ::dlclose(still_loaded);
    return;
  }
  ::close(memory_file_);
}

std::shared_ptr<const LoadedModule> LoadedModule::load(std::string_view shared_object, const std::string& name,
                                                       std::string cache_key) {
  auto fail = [&](const std::string& detail) { return CompileError(name, detail, std::string()); };
  std::string label = "kiln:" + name.substr(0, 200);
  int fd = ::memfd_create(label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw fail("cannot create an in-memory file to load the module: " + error_text(errno));
  if (!write_all(fd, shared_object)) {
    int error = errno;
    ::close(fd);
    throw fail("cannot write the module to an in-memory file: " + error_text(error));
  }
  // Best effort: nobody may change the bytes once loaded.
  ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  ::dlerror();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* message = ::dlerror();
    ::close(fd);
    throw fail(std::string("dlopen rejected the shared object: ") + (message ? message : "unknown error"));
  }
  return std::shared_ptr<const LoadedModule>(new LoadedModule(handle, fd, name, std::move(cache_key)));
}

void* LoadedModule::find_symbol(const char* symbol_name) const noexcept { return ::dlsym(handle_, symbol_name); }

void* LoadedModule::symbol(const char* symbol_name) const {
  if (void* address = find_symbol(symbol_name)) return address;
  if (!cache_key_.empty()) forget_module(cache_key_, this);
  throw CompileError(name_, std::string("the compiled module has no symbol '") + symbol_name + "'", std::string());
}

// ---- Public functions ------------------------------------------------------------------------------------

std::string cache_directory() {
  auto variable = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value ? value : "";
  };
  std::string path = variable("KILN_CACHE_DIR");
  if (path.empty()) {
    // The XDG base directory spec: a relative XDG_CACHE_HOME is invalid and ignored.
    if (std::string xdg = variable("XDG_CACHE_HOME"); !xdg.empty() && xdg[0] == '/')
      path = xdg + "/kiln";
    else if (std::string home = variable("HOME"); !home.empty())
      path = home + "/.cache/kiln";
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

BuildResult get_or_build(const Sha256Digest& key, const std::string& name,
                         const std::function<std::string()>& compile) {
  const std::string hex_key = to_hex(key);
  MemoryCache& cache = memory_cache();
  std::promise<ModulePointer> promise;
  std::shared_future<ModulePointer> running;
  {
    std::lock_guard lock(cache.mutex);
    if (auto found = cache.modules.find(hex_key); found != cache.modules.end())
      if (ModulePointer module = found->second.lock()) return {module, true, false, 0, hex_key};
    if (auto found = cache.in_flight.find(hex_key); found != cache.in_flight.end())
      running = found->second;
    else
      cache.in_flight.emplace(hex_key, promise.get_future().share());
  }
  if (running.valid()) return {running.get(), true, false, 0, hex_key};  // another thread builds this key

  try {
    BuildResult result = build_uncached(key, hex_key, name, compile);
    {
      std::lock_guard lock(cache.mutex);
      cache.in_flight.erase(hex_key);
      cache.modules[hex_key] = result.module;
      if (cache.modules.size() >= cache.sweep_at) {
        std::erase_if(cache.modules, [](const auto& entry) { return entry.second.expired(); });
        cache.sweep_at = std::max<std::size_t>(64, 2 * cache.modules.size());
      }
    }
    promise.set_value(result.module);
    return result;
  } catch (...) {
    {
      std::lock_guard lock(cache.mutex);
      cache.in_flight.erase(hex_key);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

CachedImage get_or_build_image(const Sha256Digest& key, const std::string& name,
                               const std::function<std::string()>& compile) {
  const std::string hex_key = to_hex(key);
  const std::string directory_path = cache_directory();
  FileDescriptor directory = open_cache_directory(directory_path);
  const std::string file_name = hex_key + ".kiln";
  CachedImage image;
  bool may_store = directory.get() >= 0;
  if (directory.get() >= 0) {
    DiskRead read = read_entry(directory.get(), directory_path, file_name, key);
    if (read.found) {
      runtime::log(LogLevel::info, "loaded " + name + " from the disk cache (" + directory_path + "/" + file_name + ")");
      image.bytes = std::move(read.payload);
      image.from_disk_cache = true;
      return image;
    }
    may_store = read.may_replace;
  }
  image.bytes = compile();
  if (may_store) store_entry(directory.get(), directory_path, file_name, key, image.bytes);
  return image;
}

std::uint64_t module_size_limit() { return module_size_limit_bytes.load(); }

void set_module_size_limit_for_testing(std::uint64_t bytes) {
  module_size_limit_bytes = bytes == 0 ? kDefaultModuleSizeLimit : bytes;
}

void clear_memory_cache_for_testing() {
  MemoryCache& cache = memory_cache();
  std::lock_guard lock(cache.mutex);
  cache.modules.clear();
}

}  // namespace kiln::compiler
