# What `cmake --install` and CPack put where, included by the root CMakeLists.txt.
#
#   bin/                        memsnap, memsnap-serve, memsnap-demo
#   include/memsnap/            the public C++ API (include/memsnap/ of the sources), nothing else
#   lib/                        libmemsnap_api.a and the libraries it is built on
#                               (libmemsnap_{allocator,history,snapshot}.a), and
#                               libmemsnap_record.so (memsnap record's recorder) where the build
#                               has it
#   lib/cmake/memsnap/          the CMake package: find_package(memsnap 0.1) -> memsnap::memsnap
#   lib/pkgconfig/memsnap.pc    the same for pkg-config
#
# Tests, benchmarks, the fuzz targets, the internal headers and the other libraries (replay,
# viewer, web, the PyTorch plugin) are not installed. Install rules live here, not in the layers'
# own CMakeLists.txt, because python/CMakeLists.txt adds those folders to its wheel build, which
# must not install them.
#
# The libraries are static (as in the build). A static library's private dependencies are still
# needed when a program links it: CMake exports them as $<LINK_ONLY:...>, and the package config
# (cmake/memsnapConfig.cmake.in) makes each target they name exist again: find_dependency for
# Threads, zlib, nlohmann_json and CUDA, pkg-config for libdw. msgpack is header-only and private
# to memsnap_snapshot, so it is left out of the installed interface (snapshot/CMakeLists.txt).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(memsnap_package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/memsnap)

# memsnap::memsnap: the public API's library and its usage requirements, C++20 included (the
# headers need it). An executable is already called memsnap, hence the target's own name.
add_library(memsnap_libraries INTERFACE)
target_link_libraries(memsnap_libraries INTERFACE memsnap_api)
target_compile_features(memsnap_libraries INTERFACE cxx_std_20)
set_target_properties(memsnap_libraries PROPERTIES EXPORT_NAME memsnap)
add_library(memsnap::memsnap ALIAS memsnap_libraries)
set_target_properties(memsnap_api PROPERTIES EXPORT_NAME api)
set_target_properties(memsnap_allocator PROPERTIES EXPORT_NAME allocator)
set_target_properties(memsnap_history PROPERTIES EXPORT_NAME history)
set_target_properties(memsnap_snapshot PROPERTIES EXPORT_NAME snapshot)

install(TARGETS memsnap memsnap-demo RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# `memsnap serve` runs memsnap-serve from memsnap's own folder (cli/serve_forward.cpp).
if(TARGET memsnap-serve)
  install(TARGETS memsnap-serve RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
# `memsnap record`'s injected recorder, where the CLI looks for it (cli/CMakeLists.txt).
if(TARGET memsnap_record)
  install(TARGETS memsnap_record LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# The tools and the recorder are installed without their debug information (their symbols
# stay, so a backtrace still names functions): it is most of their size, and nothing they show
# comes from it (the recorder finds its own frames by address). memsnap-demo keeps its own,
# which names files and lines in the stacks it records; so do the static libraries, for the
# programs built with them.
install(CODE "
  foreach(file ${CMAKE_INSTALL_BINDIR}/memsnap ${CMAKE_INSTALL_BINDIR}/memsnap-serve
               ${CMAKE_INSTALL_LIBDIR}/libmemsnap_record.so)
    set(installed \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/\${file}\")
    if(EXISTS \"\${installed}\")
      execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug \"\${installed}\" RESULT_VARIABLE failed)
      if(failed)
        message(FATAL_ERROR \"${CMAKE_STRIP} --strip-debug \${installed} failed\")
      endif()
    endif()
  endforeach()
")
# The public API's headers are included as <memsnap/allocator.h>; they include only each other.
# The libraries it is built on are installed for the link alone: their headers are not.
install(TARGETS memsnap_api memsnap_libraries EXPORT memsnapTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS memsnap_allocator memsnap_history memsnap_snapshot EXPORT memsnapTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT memsnapTargets NAMESPACE memsnap:: DESTINATION ${memsnap_package_dir})
# The CCCL adaptors (Thrust, CUB, cuda::mr) are CUDA C++ for nvcc: installed by a CUDA build.
if(CUDAToolkit_FOUND)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/memsnap DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h")
else()
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/memsnap DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h" PATTERN "thrust_allocator.h" EXCLUDE
          PATTERN "cub_temporary_storage.h" EXCLUDE PATTERN "cuda_memory_resource.h" EXCLUDE)
endif()

# The CMake package.
set(MEMSNAP_PACKAGE_WITH_CUDA ${CUDAToolkit_FOUND})
if(NOT MEMSNAP_PACKAGE_WITH_CUDA)
  set(MEMSNAP_PACKAGE_WITH_CUDA FALSE)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/memsnapConfig.cmake.in
  ${PROJECT_BINARY_DIR}/memsnapConfig.cmake INSTALL_DESTINATION ${memsnap_package_dir})
# 0.x: a new minor version may change the API, so 0.1 accepts 0.1.x only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/memsnapConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/memsnapConfig.cmake ${PROJECT_BINARY_DIR}/memsnapConfigVersion.cmake
        DESTINATION ${memsnap_package_dir})

# The pkg-config file. Its prefix is found from where the file lies (${pcfiledir}), so it stays
# right when installed under another prefix (`cmake --install --prefix`, the .deb's /usr).
# pkg-config --libs gives everything a link needs: the libraries are static, so their own
# dependencies go in Libs and Requires rather than the .private fields.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(MEMSNAP_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH pc_up "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" pc_up "${pc_up}")
  set(MEMSNAP_PC_PREFIX "\${pcfiledir}/${pc_up}")
endif()
set(MEMSNAP_PC_CFLAGS "")
set(MEMSNAP_PC_LIBS "")
if(CUDAToolkit_FOUND)
  string(APPEND MEMSNAP_PC_CFLAGS " -DMEMSNAP_HAVE_CUDA=1")
  # The runtime memsnap_allocator linked, from where this build found it.
  if(MEMSNAP_CUDART STREQUAL "shared")
    get_filename_component(cudart_dir "${CUDA_cudart_LIBRARY}" DIRECTORY)
    string(APPEND MEMSNAP_PC_LIBS " -L${cudart_dir} -lcudart")
  else()
    get_filename_component(cudart_dir "${CUDA_cudart_static_LIBRARY}" DIRECTORY)
    string(APPEND MEMSNAP_PC_LIBS " -L${cudart_dir} -lcudart_static -lrt")
  endif()
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/memsnap.pc.in ${PROJECT_BINARY_DIR}/memsnap.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/memsnap.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

include(${PROJECT_SOURCE_DIR}/cmake/MemsnapPackage.cmake)
