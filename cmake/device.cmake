# A rank's device (engine/device): the CPU backend always, the CUDA backend
# when the toolkit is there (after cmake/cuda.cmake has set PTDP_CUDA).
add_library(ptdp_device STATIC engine/device/device.cpp engine/device/cpu_device.cpp)
target_include_directories(ptdp_device PUBLIC ${CMAKE_SOURCE_DIR})
if(PTDP_CUDA)
  target_sources(ptdp_device PRIVATE engine/device/cuda_device.cu)
  target_compile_definitions(ptdp_device PRIVATE PTDP_WITH_CUDA)
  target_link_libraries(ptdp_device PUBLIC CUDA::cudart)
endif()
