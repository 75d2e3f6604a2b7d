# `cpack -G DEB` in a build folder makes memsnap_<version>_<arch>.deb: what `cmake --install`
# installs (cmake/MemsnapInstall.cmake), under /usr. Its Depends line is worked out by Debian's
# dpkg-shlibdeps from the shared libraries the installed programs load, so it names Debian
# packages only; the CUDA runtime is linked statically, and the driver's libcuda is opened at run
# time when there is one, so neither appears there. Building programs against the package needs
# the -dev packages in Suggests (and, for a CUDA-enabled build, the CUDA toolkit).
set(CPACK_PACKAGE_NAME memsnap)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "GPU memory made understandable: an instrumented CUDA caching allocator, history and snapshots")
set(CPACK_PACKAGE_DESCRIPTION
    "memsnap is an instrumented CUDA caching allocator that makes PyTorch's decisions, records \
history and writes snapshots, with the memsnap command to read, replay and explain them \
(and serve them to a browser), and memsnap-demo, a training loop on the allocator. Also the \
static libraries, headers, CMake package and pkg-config file for C++ programs.")
set(MEMSNAP_PACKAGE_MAINTAINER "memsnap developers" CACHE STRING "The .deb's Maintainer field")
set(CPACK_PACKAGE_CONTACT "${MEMSNAP_PACKAGE_MAINTAINER}")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libunwind is opened at run time as a fallback stack walker (history/stack_capture.cpp), so
# dpkg-shlibdeps cannot see it; without it libgcc's walk serves.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libunwind8")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libdw-dev, zlib1g-dev, nlohmann-json3-dev, pkgconf | pkg-config, cmake")
# Without dpkg-shlibdeps CPack would write a .deb with no Depends at all: refuse instead.
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_SOURCE_DIR}/cmake/MemsnapCPackOptions.cmake)
include(CPack)
