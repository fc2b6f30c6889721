// The CUDA backend of a build without a CUDA compiler: every request is a clear error.
#include "hotpass/backend/backend.h"

namespace hp::backend {

bool built_with_cuda() { return false; }
bool cuda_available() { return false; }

Result<std::unique_ptr<Backend>> create_cuda_backend(int) {
    return error("this hotpass was built without CUDA (no nvcc found at configure time)");
}

}  // namespace hp::backend
