#include "compiler/cache/module_cache.h"

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
#include <random>
#include <set>
#include <system_error>
#include <unordered_map>

namespace kiln::compiler {
namespace {

// ---- On-disk format (docs/cache.md) ----------------------------------------------------------------------
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'M', 'O', 'D', '1'};
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderSize = 88;  // magic 8, version 4, reserved 4, key 32, payload size 8, payload hash 32
constexpr std::uint64_t kMaxPayloadSize = std::uint64_t(1) << 30;

std::string error_text(int error) { return std::error_code(error, std::generic_category()).message(); }

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

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    data.remove_prefix(std::size_t(written));
  }
  return true;
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

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

// mkdir -p, every missing component with mode 0700. Returns 0 or an errno value.
int make_directories(const std::string& path) {
  for (std::size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && prefix.back() != '/' && ::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return errno;
    if (slash == std::string::npos) return 0;
  }
}

// Opens (creating it if needed) the cache directory and checks that only the current user can write to it.
// Returns -1 (after a warning, once) if the disk cache cannot be used.
int open_cache_directory(const std::string& path) {
  if (path.empty()) return -1;
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    if (int error = make_directories(path)) {
      warn_directory_once(path, "cannot create it: " + error_text(error));
      return -1;
    }
    fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  if (fd < 0) {
    warn_directory_once(path, "cannot open it: " + error_text(errno));
    return -1;
  }
  struct stat status {};
  std::string problem;
  if (::fstat(fd, &status) != 0)
    problem = "cannot stat it: " + error_text(errno);
  else if (status.st_uid != ::getuid())
    problem = "it is owned by uid " + std::to_string(status.st_uid) + ", not by the current user";
  else if (status.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(status.st_mode & 07777));
    problem = std::string("it is group- or world-writable (mode ") + mode + ")";
  }
  if (!problem.empty()) {
    ::close(fd);
    warn_directory_once(path, problem);
    return -1;
  }
  return fd;
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
  if (status.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(status.st_mode & 07777));
    return reject(std::string("is group- or world-writable (mode ") + mode + ")");
  }
  if (std::uint64_t(status.st_size) > kHeaderSize + kMaxPayloadSize) return reject("is too large");
  // The bytes checked are the bytes used: read once, verify, hand on from memory.
  std::string entry(std::size_t(status.st_size), '\0');
  std::size_t done = 0;
  while (done < entry.size()) {
    ssize_t got = ::pread(file.get(), entry.data() + done, entry.size() - done, off_t(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return reject("cannot be read (" + error_text(errno) + ")");
    if (got == 0) break;
    done += std::size_t(got);
  }
  entry.resize(done);
  if (std::string problem = check_entry(entry, key); !problem.empty()) return reject(problem);
  read.payload = entry.substr(kHeaderSize);
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
    lookup.module = LoadedModule::load(read.payload, name);
  } catch (const CompileError& error) {
    runtime::warn("cache entry " + directory_path + "/" + file_name + " could not be loaded (" + error.detail() +
                  "); rebuilding");
  }
  return lookup;
}

std::string unique_suffix() {
  static std::atomic<std::uint64_t> counter{0};
  static const std::uint64_t seed = std::random_device{}();
  char text[64];
  std::snprintf(
      text, sizeof text, "%d.%llx.%llx", int(::getpid()), (unsigned long long)counter++,
      (unsigned long long)(seed ^ std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count())));
  return text;
}

// Atomically creates or replaces the entry: a new file in the same directory (O_EXCL, 0600), written, fsync'ed,
// then renamed over the entry. Readers see the old entry or the complete new one, never a partial one.
void store_entry(int directory, const std::string& directory_path, const std::string& file_name,
                 const Sha256Digest& key, std::string_view payload) {
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    temporary = "." + file_name + ".tmp." + unique_suffix();
    fd = ::openat(directory, temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return warn_directory_once(directory_path, "cannot create a file in it: " + error_text(errno));
  std::string problem;
  if (!write_all(fd, encode_header(key, payload)) || !write_all(fd, payload))
    problem = "cannot write " + temporary + ": " + error_text(errno);
  else if (::fsync(fd) != 0)
    problem = "cannot sync " + temporary + ": " + error_text(errno);
  else if (::fchmod(fd, 0600) != 0)
    problem = "cannot chmod " + temporary + ": " + error_text(errno);
  if (::close(fd) != 0 && problem.empty()) problem = "cannot write " + temporary + ": " + error_text(errno);
  if (problem.empty() && ::renameat(directory, temporary.c_str(), directory, file_name.c_str()) != 0)
    problem = "cannot rename " + temporary + " to " + file_name + ": " + error_text(errno);
  if (problem.empty()) return;
  ::unlinkat(directory, temporary.c_str(), 0);
  warn_directory_once(directory_path, problem);
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
  FileDescriptor directory(open_cache_directory(directory_path));
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
  result.module = LoadedModule::load(shared_object, name);
  runtime::log(LogLevel::info, "compiled " + name + " in " + std::to_string(result.compile_seconds) + " s (cache key " +
                                   hex_key.substr(0, 16) + ")");
  if (may_store) store_entry(directory.get(), directory_path, file_name, key, shared_object);
  return result;
}

}  // namespace

// ---- LoadedModule ----------------------------------------------------------------------------------------

LoadedModule::LoadedModule(void* handle, int memory_file, std::string name)
    : handle_(handle), memory_file_(memory_file), name_(std::move(name)) {}

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

std::shared_ptr<const LoadedModule> LoadedModule::load(std::string_view shared_object, const std::string& name) {
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
  return std::shared_ptr<const LoadedModule>(new LoadedModule(handle, fd, name));
}

void* LoadedModule::find_symbol(const char* symbol_name) const noexcept { return ::dlsym(handle_, symbol_name); }

void* LoadedModule::symbol(const char* symbol_name) const {
  if (void* address = find_symbol(symbol_name)) return address;
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
  FileDescriptor directory(open_cache_directory(directory_path));
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

void clear_memory_cache_for_testing() {
  MemoryCache& cache = memory_cache();
  std::lock_guard lock(cache.mutex);
  cache.modules.clear();
}

}  // namespace kiln::compiler
