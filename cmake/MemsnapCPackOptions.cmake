# Read by cpack for each generator (CPACK_PROJECT_CONFIG_FILE in cmake/MemsnapPackage.cmake).
if(CPACK_GENERATOR STREQUAL "DEB")
  find_program(MEMSNAP_DPKG_SHLIBDEPS dpkg-shlibdeps)
  if(NOT MEMSNAP_DPKG_SHLIBDEPS)
    message(FATAL_ERROR "memsnap: the .deb's Depends line comes from dpkg-shlibdeps, which is "
                        "missing (Debian: apt-get install dpkg-dev)")
  endif()
endif()
