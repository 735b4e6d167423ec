#pragma once
// Device memory, streams and events for the hip backend, behind an interface that plain g++
// compiles (no vendor headers): streams are hipStream_t (vendor.h's host part), events opaque handles.
// Every hip* call is checked; failures throw DeviceError, which the backend turns into an
// InputError naming the stage (the CLI prints one line, exit 2). No fmt here: nvcc 13's host
// pass rejects fmt 9's headers.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <stdexcept>
#include "hip/vendor.h"

namespace tdiff::hip {

using Stream = hipStream_t;
using Event = void*;   // hipEvent_t

class DeviceError : public std::runtime_error {
 public:
  explicit DeviceError(const std::string& what) : std::runtime_error(what) {}
};
// Out of device memory; `bytes` is the failed request.
class DeviceOutOfMemory : public DeviceError {
 public:
  DeviceOutOfMemory(const std::string& what, std::size_t bytes) : DeviceError(what), bytes(bytes) {}
  std::size_t bytes;
};

struct DeviceInfo {
  std::string name, arch;      // "NVIDIA H200", "sm_90" / "gfx90a"
  std::size_t total_bytes = 0;
  int driver = 0, runtime = 0;
  int wave_size = 0;
};
// Selects device 0; DeviceError "no GPU device" when there is none.
DeviceInfo device_init();

// Device memory free now (hipMemGetInfo).
std::size_t device_free_bytes();
// Raw device allocation; DeviceOutOfMemory with the request size on failure.
void* device_alloc(std::size_t bytes);
void device_free(void* p);
// Page-locked host memory for asynchronous copies.
void* pinned_alloc(std::size_t bytes);
void pinned_free(void* p);

// high_priority: the device schedules this stream's workgroups first when slots free up
// (the copy stream's small packing kernels then need not wait for a long GEMM to drain).
Stream stream_create(bool high_priority = false);
void stream_destroy(Stream s);
void stream_sync(Stream s);  // DeviceError on an earlier kernel fault
Event event_create();
void event_destroy(Event e);
void event_record(Event e, Stream s);
void stream_wait(Stream s, Event e);
void event_sync(Event e);
// Whether the work recorded before e has finished (hipEventQuery); DeviceError on a fault.
bool event_done(Event e);
float event_ms(Event a, Event b);
void device_sync();

void copy_h2d(void* dst, const void* src, std::size_t bytes, Stream s);  // async when src is pinned
void copy_d2h(void* dst, const void* src, std::size_t bytes, Stream s);
void copy_d2d(void* dst, const void* src, std::size_t bytes, Stream s);
void memset_async(void* dst, int value, std::size_t bytes, Stream s);
// Checks the last launch (configuration errors surface here).
void check_launch(const char* what);

// A device allocation pool: freed blocks are kept per exact size and reused, so a stage
// graph that allocates the same shapes every layer stops calling hipMalloc after layer one.
class DevicePool {
 public:
  ~DevicePool();
  void* get(std::size_t bytes);
  void put(void* p, std::size_t bytes);
  void trim();  // frees every cached block
  std::size_t in_use() const { return in_use_; }
  std::size_t cached() const;  // bytes of freed blocks kept for reuse

 private:
  std::multimap<std::size_t, void*> free_;
  std::size_t in_use_ = 0;
  mutable std::mutex mutex_;
};

// An RAII device buffer from a pool (or hipMalloc directly when pool is null).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, DevicePool* pool = nullptr);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept { DeviceBuffer t(std::move(o)); swap(t); return *this; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }
  std::size_t bytes() const { return n_; }

 private:
  void swap(DeviceBuffer& o) noexcept { std::swap(p_, o.p_), std::swap(n_, o.n_), std::swap(pool_, o.pool_); }
  void* p_ = nullptr;
  std::size_t n_ = 0;
  DevicePool* pool_ = nullptr;
};

// Page-locked host blocks reused by size; a block handed out as shared_ptr returns to the
// pool when the last holder (a host Tensor) lets go. The pool outlives its blocks.
class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  ~PinnedPool();
  std::shared_ptr<void> get(std::size_t bytes);

 private:
  std::multimap<std::size_t, void*> free_;
  std::mutex mutex_;
};

}  // namespace tdiff::hip
