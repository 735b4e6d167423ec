// Device memory: an impossible allocation is a DeviceOutOfMemory that names the bytes (the
// backend adds the stage), and the pool reuses freed blocks of the same size.
#include <string>

#include "gpu_test.h"

namespace tdiff::gputest {
namespace {

TEST(Device, OutOfMemoryNamesTheBytes) {
  test_stream();
  const std::size_t huge = std::size_t{1} << 52;  // 4 PiB
  try {
    hip::device_alloc(huge);
    FAIL() << "a 4 PiB allocation succeeded";
  } catch (const hip::DeviceOutOfMemory& e) {
    EXPECT_EQ(e.bytes, huge);
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
  }
  // The device still works afterwards (the allocation error is not sticky).
  Dev<float> d(std::vector<float>{1, 2, 3});
  EXPECT_EQ(d.get(), (std::vector<float>{1, 2, 3}));
}

TEST(Device, PoolReusesBlocks) {
  test_stream();
  hip::DevicePool pool;
  void* first;
  {
    hip::DeviceBuffer a(1 << 20, &pool);
    first = a.get();
    EXPECT_EQ(pool.in_use(), std::size_t{1} << 20);
  }
  EXPECT_EQ(pool.in_use(), 0u);
  hip::DeviceBuffer b(1 << 20, &pool);
  EXPECT_EQ(b.get(), first);
}

}  // namespace
}  // namespace tdiff::gputest
