# The layers under the model, shared by the full build and PTDP_GPU_ONLY:
# core (host allocator, dtypes, errors), the CPU kernels, and a rank's device
# with its op table (engine/device): the CPU backend always, the CUDA backend
# when cmake/cuda.cmake has set PTDP_CUDA.
add_library(ptdp_core STATIC engine/core/allocator.cpp engine/core/dtype.cpp engine/core/status.cpp
            engine/core/utf8.cpp)
target_include_directories(ptdp_core PUBLIC ${CMAKE_SOURCE_DIR})

add_library(ptdp_cpu_kernels STATIC kernels/cpu/gemm.cpp kernels/cpu/layernorm.cpp
  kernels/cpu/bias_gelu.cpp kernels/cpu/dropout.cpp kernels/cpu/softmax.cpp
  kernels/cpu/embedding.cpp kernels/cpu/cross_entropy.cpp kernels/cpu/adamw.cpp
  kernels/cpu/reduce.cpp kernels/cpu/flash_attention.cpp kernels/cpu/rmsnorm.cpp
  kernels/cpu/swiglu.cpp kernels/cpu/rope.cpp)
target_link_libraries(ptdp_cpu_kernels PUBLIC ptdp_core)
if(OPENBLAS_LIB)
  target_include_directories(ptdp_cpu_kernels PUBLIC ${CBLAS_INCLUDE_DIR})
  target_link_libraries(ptdp_cpu_kernels PUBLIC ${OPENBLAS_LIB})
else()
  # The GPU machine has no BLAS: the CPU twins' GEMM is plain loops there.
  target_compile_definitions(ptdp_cpu_kernels PRIVATE PTDP_NO_BLAS)
endif()
foreach(lib ptdp_core ptdp_cpu_kernels)
  if(OpenMP_CXX_FOUND)
    target_link_libraries(${lib} PUBLIC OpenMP::OpenMP_CXX)
  else()
    target_compile_options(${lib} PRIVATE -Wno-unknown-pragmas)
  endif()
endforeach()

add_library(ptdp_device STATIC engine/device/device.cpp engine/device/cpu_device.cpp
  engine/device/ops.cpp engine/device/cpu_ops.cpp engine/device/op_profile.cpp)
target_link_libraries(ptdp_device PUBLIC ptdp_cpu_kernels)
if(PTDP_CUDA)
  target_sources(ptdp_device PRIVATE engine/device/cuda_device.cu engine/device/cuda_ops.cu)
  target_compile_definitions(ptdp_device PRIVATE PTDP_WITH_CUDA)
  target_link_libraries(ptdp_device PUBLIC ptdp_cuda_kernels CUDA::cudart)
endif()
