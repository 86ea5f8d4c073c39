#pragma once
// Compiled modules (shared objects), cached in memory per process and on disk.
//
// This layer knows nothing about compilers: the CPU code generator
// (codegen/cpu/compile_command.h, `build_module`) computes a key that hashes
// everything a build depends on and hands get_or_build() a callback that
// produces the shared object's bytes. The on-disk format and the checks made
// before an entry is trusted are described in docs/cache.md.

#include "compiler/cache/sha256.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace kiln::compiler {

// A shared object loaded with dlopen (RTLD_NOW | RTLD_LOCAL) from an in-memory
// copy of its bytes (a sealed memfd, opened as /proc/self/fd/N), so the loaded
// code is exactly the bytes that were checked. dlclose'd when the last
// reference goes: function pointers from symbol() are valid only while a
// reference to the module is held.
class LoadedModule {
 public:
  // Loads `shared_object` (the bytes of a .so). Throws kiln::CompileError
  // (op = `name`) with the loader's message when dlopen rejects it.
  // `cache_key` (64 hex digits) is the key get_or_build caches it under, if
  // any: see symbol().
  static std::shared_ptr<const LoadedModule> load(std::string_view shared_object, const std::string& name,
                                                  std::string cache_key = {});

  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  // The address of `symbol_name` (dlsym). Throws kiln::CompileError if
  // missing: a module without a symbol its user needs failed to load (a
  // compiler that built something else than the source), so it is dropped
  // from the memory and disk caches too, and the next build compiles again.
  void* symbol(const char* symbol_name) const;
  // The same, or nullptr if missing.
  void* find_symbol(const char* symbol_name) const noexcept;
  // The function's name given at load time (for messages).
  const std::string& name() const { return name_; }

 private:
  LoadedModule(void* handle, int memory_file, std::string name, std::string cache_key);

  void* handle_;
  // The memfd the module was loaded from, kept open while loaded: glibc's
  // dlopen finds already-loaded objects by path, so /proc/self/fd/N must not
  // name another module's file while this one is loaded.
  int memory_file_;
  std::string name_;
  std::string cache_key_;
};

struct BuildResult {
  std::shared_ptr<const LoadedModule> module;
  bool from_memory_cache = false;  // also true for a caller that waited for another thread's build
  bool from_disk_cache = false;
  double compile_seconds = 0;  // time spent in the compiler (0 on cache hits)
  std::string key;             // the cache key, 64 hex digits
};

// Returns the module for `key`:
//  1. from the process-wide memory cache (key -> weak reference: a module stays
//     cached while anything holds it);
//  2. else from the disk cache (cache_directory()), if an entry passes every check;
//  3. else by calling `compile`, which returns the bytes of a shared object (or
//     throws kiln::CompileError); the module is loaded, then written to the disk
//     cache and the memory cache. Nothing is cached if loading fails (a
//     module found to lack a symbol later is dropped: LoadedModule::symbol).
// Thread-safe: concurrent calls with the same key run `compile` once (the
// others wait for it and share its result or its exception); different keys
// proceed in parallel. Problems with the disk cache are logged as warnings and
// never fail the call. `name` is used in messages.
BuildResult get_or_build(const Sha256Digest& key, const std::string& name, const std::function<std::string()>& compile);

// The disk cache alone, for modules that are not shared objects (the CUDA
// JIT's cubin or PTX images, which the driver loads): the checked payload of
// `key`'s entry, else the bytes `compile` returns (or its CompileError),
// which are then stored. The same file format, directory and checks as
// get_or_build; no memory cache (the caller keeps what it loads) and no
// deduplication of concurrent builds. `name` is used in messages.
struct CachedImage {
  std::string bytes;
  bool from_disk_cache = false;
};
CachedImage get_or_build_image(const Sha256Digest& key, const std::string& name,
                               const std::function<std::string()>& compile);

// The disk cache directory from the environment: $KILN_CACHE_DIR, else
// $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln; empty if none is set. Read on
// every call (it is not created here).
std::string cache_directory();

// The largest shared object a build accepts and the disk cache stores or
// reads: 1 GiB.
std::uint64_t module_size_limit();

// Test hook: sets module_size_limit() (0 restores 1 GiB), so that a test need
// not write a gigabyte to pass it.
void set_module_size_limit_for_testing(std::uint64_t bytes);

// Test hook: forgets every module in the memory cache (modules still
// referenced elsewhere stay loaded).
void clear_memory_cache_for_testing();

}  // namespace kiln::compiler
