// Device memory, streams, events (device.h): the only place besides the kernels that calls
// the hip* runtime.
#include "hip/device.h"

#include <string>

#include "hip/vendor.h"

namespace tdiff::hip {

namespace {
[[noreturn]] void fail(hipError_t e, const char* what) {
  if (e == hipErrorMemoryAllocation) throw DeviceOutOfMemory(std::string(what) + ": out of device memory", 0);
  throw DeviceError(std::string(what) + ": " + hipGetErrorString(e));
}
inline void check(hipError_t e, const char* what) {
  if (e != hipSuccess) fail(e, what);
}
hipStream_t S(Stream s) { return s; }
hipEvent_t E(Event e) { return static_cast<hipEvent_t>(e); }
}  // namespace

DeviceInfo device_init() {
  int n = 0;
  const hipError_t e = hipGetDeviceCount(&n);
  if (e != hipSuccess || n == 0)
    throw DeviceError(std::string("hip backend: no GPU device (") + (e != hipSuccess ? hipGetErrorString(e) : "0 devices") + ")");
  check(hipSetDevice(0), "hipSetDevice");
  hipDeviceProp_t p;
  check(hipGetDeviceProperties(&p, 0), "hipGetDeviceProperties");
  DeviceInfo info;
  info.name = p.name;
  info.arch = vendor::arch_name(p);
  info.total_bytes = p.totalGlobalMem;
  info.wave_size = p.warpSize;
  check(hipDriverGetVersion(&info.driver), "hipDriverGetVersion");
  check(hipRuntimeGetVersion(&info.runtime), "hipRuntimeGetVersion");
  return info;
}

std::size_t device_free_bytes() {
  std::size_t free_b = 0, total_b = 0;
  check(hipMemGetInfo(&free_b, &total_b), "hipMemGetInfo");
  return free_b;
}

void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  const hipError_t e = hipMalloc(&p, bytes == 0 ? 1 : bytes);
  if (e == hipErrorMemoryAllocation) {
    (void)hipGetLastError();  // clear the sticky allocation error
    std::size_t free_b = 0, total_b = 0;
    (void)hipMemGetInfo(&free_b, &total_b);
    throw DeviceOutOfMemory("out of device memory allocating " + std::to_string(bytes) + " bytes (" + std::to_string(free_b) +
                                " of " + std::to_string(total_b) + " bytes free)", bytes);
  }
  check(e, "hipMalloc");
  return p;
}
void device_free(void* p) {
  if (p) (void)hipFree(p);  // destructors never throw; a fault shows at the next sync
}
void* pinned_alloc(std::size_t bytes) {
  void* p = nullptr;
  check(hipHostMalloc(&p, bytes == 0 ? 1 : bytes, hipHostMallocDefault), "hipHostMalloc (pinned host memory)");
  return p;
}
void pinned_free(void* p) {
  if (p) (void)hipHostFree(p);
}

Stream stream_create(bool high_priority) {
  hipStream_t s;
  if (!high_priority) {
    check(hipStreamCreateWithFlags(&s, hipStreamNonBlocking), "hipStreamCreate");
    return s;
  }
  int least = 0, greatest = 0;  // numerically: greatest is the highest priority (the lowest number)
  check(hipDeviceGetStreamPriorityRange(&least, &greatest), "hipDeviceGetStreamPriorityRange");
  check(hipStreamCreateWithPriority(&s, hipStreamNonBlocking, greatest), "hipStreamCreateWithPriority");
  return s;
}
void stream_destroy(Stream s) { (void)hipStreamDestroy(S(s)); }
void stream_sync(Stream s) { check(hipStreamSynchronize(S(s)), "kernel fault"); }
Event event_create() {
  hipEvent_t e;
  check(hipEventCreate(&e), "hipEventCreate");
  return e;
}
void event_destroy(Event e) { (void)hipEventDestroy(E(e)); }
void event_record(Event e, Stream s) { check(hipEventRecord(E(e), S(s)), "hipEventRecord"); }
void stream_wait(Stream s, Event e) { check(hipStreamWaitEvent(S(s), E(e), 0), "hipStreamWaitEvent"); }
void event_sync(Event e) { check(hipEventSynchronize(E(e)), "kernel fault"); }
bool event_done(Event e) {
  const hipError_t r = hipEventQuery(E(e));
  if (r == hipErrorNotReady) return false;
  check(r, "kernel fault");
  return true;
}
float event_ms(Event a, Event b) {
  float ms = 0;
  check(hipEventElapsedTime(&ms, E(a), E(b)), "hipEventElapsedTime");
  return ms;
}
void device_sync() { check(hipDeviceSynchronize(), "kernel fault"); }

void copy_h2d(void* dst, const void* src, std::size_t bytes, Stream s) {
  if (bytes) check(hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, S(s)), "hipMemcpyAsync host->device");
}
void copy_d2h(void* dst, const void* src, std::size_t bytes, Stream s) {
  if (bytes) check(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToHost, S(s)), "hipMemcpyAsync device->host");
}
void copy_d2d(void* dst, const void* src, std::size_t bytes, Stream s) {
  if (bytes) check(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, S(s)), "hipMemcpyAsync device->device");
}
void memset_async(void* dst, int value, std::size_t bytes, Stream s) {
  if (bytes) check(hipMemsetAsync(dst, value, bytes, S(s)), "hipMemsetAsync");
}
void check_launch(const char* what) { check(hipGetLastError(), what); }

DevicePool::~DevicePool() { trim(); }
void* DevicePool::get(std::size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(bytes);
    if (it != free_.end()) {
      void* p = it->second;
      free_.erase(it);
      in_use_ += bytes;
      return p;
    }
  }
  void* p;
  try {
    p = device_alloc(bytes);
  } catch (const DeviceOutOfMemory&) {
    trim();  // cached blocks of other sizes may be what is missing
    p = device_alloc(bytes);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  in_use_ += bytes;
  return p;
}
void DevicePool::put(void* p, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.emplace(bytes, p);
  in_use_ -= bytes;
}
std::size_t DevicePool::cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (const auto& [bytes, p] : free_) n += bytes;
  return n;
}
void DevicePool::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [n, p] : free_) device_free(p);
  free_.clear();
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, DevicePool* pool) : n_(bytes), pool_(pool) {
  p_ = pool ? pool->get(bytes) : device_alloc(bytes);
}
DeviceBuffer::~DeviceBuffer() {
  if (!p_) return;
  if (pool_) pool_->put(p_, n_);
  else device_free(p_);
}

PinnedPool::~PinnedPool() {
  for (auto& [n, p] : free_) pinned_free(p);
}
std::shared_ptr<void> PinnedPool::get(std::size_t bytes) {
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(bytes);
    if (it != free_.end()) p = it->second, free_.erase(it);
  }
  if (!p) p = pinned_alloc(bytes);
  auto self = shared_from_this();
  return std::shared_ptr<void>(p, [self, bytes](void* q) {
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->free_.emplace(bytes, q);
  });
}

}  // namespace tdiff::hip
