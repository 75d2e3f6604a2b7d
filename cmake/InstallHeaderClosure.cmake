# Run at install time (install(CODE) in cmake/MemsnapInstall.cmake): installs the public headers
# and every memsnap header they include, directly or not, under <prefix>/<destination>/<layer>/.
# Nothing else: headers only the implementation includes stay out. Computed when installing,
# so the set follows the sources without a list to keep up to date.
#
# In: memsnap_source_dir, memsnap_public_headers (paths relative to the source root, like
# "allocator/caching_allocator.h"), memsnap_header_destination (relative to the prefix).
cmake_policy(VERSION 3.22)  # install scripts start with no policies set (include() scopes this)
set(pending ${memsnap_public_headers})
set(closure "")
while(pending)
  list(POP_FRONT pending header)
  if(header IN_LIST closure)
    continue()
  endif()
  if(NOT EXISTS "${memsnap_source_dir}/${header}")
    message(FATAL_ERROR "memsnap install: ${header} is included by a public header but does not exist")
  endif()
  list(APPEND closure ${header})
  # memsnap's own includes are the quoted ones naming a layer folder: "allocator/block.h".
  file(STRINGS "${memsnap_source_dir}/${header}" include_lines
       REGEX "^[ \t]*#[ \t]*include[ \t]*\"[a-z_]+/[A-Za-z0-9_]+\\.h\"")
  foreach(line IN LISTS include_lines)
    string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" included "${line}")
    list(APPEND pending ${included})
  endforeach()
endwhile()

list(SORT closure)
set(destination "${memsnap_header_destination}")
if(NOT IS_ABSOLUTE "${destination}")
  set(destination "${CMAKE_INSTALL_PREFIX}/${destination}")
endif()
foreach(header IN LISTS closure)
  get_filename_component(folder "${header}" DIRECTORY)
  file(INSTALL "${memsnap_source_dir}/${header}"
       DESTINATION "${destination}/${folder}")
endforeach()
