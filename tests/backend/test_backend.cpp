// The backend's answer to a CUDA request where none can be served: on a machine without an NVIDIA
// GPU or driver (CI, a laptop) an error that says why and names the CPU backend, never a crash or
// a bare CUDA error code.
#include <gtest/gtest.h>

#include "hotpass/backend/backend.h"

namespace hp::backend {
namespace {

TEST(CudaBackend, WithoutADeviceTheErrorSaysWhyAndNamesTheCpuBackend) {
    if (cuda_available()) GTEST_SKIP() << "a CUDA device answers here (the GPU tests cover it)";
    auto backend = create_backend(DeviceKind::cuda, 0);
    ASSERT_FALSE(backend.ok());
    const std::string message = backend.error();
    if (!built_with_cuda()) {
        EXPECT_NE(message.find("built without CUDA"), std::string::npos) << message;
        return;
    }
    EXPECT_NE(message.find("no CUDA device: "), std::string::npos) << message;
    EXPECT_NE(message.find("--device cpu"), std::string::npos) << message;
}

}  // namespace
}  // namespace hp::backend
