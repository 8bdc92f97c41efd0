# The CUDA side: the kernels of the op interface and cuBLASLt GEMMs. Included by
# the full build (optional: CPU-only without a toolkit) and by PTDP_GPU_ONLY
# (required). Sets PTDP_CUDA.
find_package(CUDAToolkit QUIET)
include(CheckLanguage)
check_language(CUDA)
if(CUDAToolkit_FOUND AND CMAKE_CUDA_COMPILER)
  # Hopper binaries plus portable PTX (compute_80) that newer GPUs JIT-compile.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "90-real;80-virtual")
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(PTDP_CUDA ON)
  message(STATUS "CUDA toolkit ${CUDAToolkit_VERSION}: building the CUDA kernels for ${CMAKE_CUDA_ARCHITECTURES}")
elseif(PTDP_GPU_ONLY)
  message(FATAL_ERROR "PTDP_GPU_ONLY needs the CUDA toolkit (nvcc, cudart, cuBLASLt); none was found")
else()
  set(PTDP_CUDA OFF)
  message(STATUS "CUDA toolkit not found: CPU-only build")
endif()

if(PTDP_CUDA)
  # The CUDA op table (engine/device/cuda_ops.cu) calls them; tests/gpu checks
  # each against its CPU twin.
  add_library(ptdp_cuda_kernels STATIC kernels/cuda/layernorm.cu kernels/cuda/bias_gelu.cu
    kernels/cuda/softmax.cu kernels/cuda/embedding.cu kernels/cuda/cross_entropy.cu
    kernels/cuda/adamw.cu kernels/cuda/gemm.cu kernels/cuda/dropout.cu kernels/cuda/reduce.cu
    kernels/cuda/flash_attention.cu kernels/cuda/flash_attention_mma.cu
    kernels/cuda/swiglu.cu kernels/cuda/rope.cu)
  target_include_directories(ptdp_cuda_kernels PUBLIC ${CMAKE_SOURCE_DIR})
  # ptdp_core: the errors the launchers throw (engine/core/status.h)
  target_link_libraries(ptdp_cuda_kernels PUBLIC ptdp_core CUDA::cudart CUDA::cublasLt CUDA::cublas)  # cublas: status names
endif()
