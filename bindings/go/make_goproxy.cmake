# Writes the Go module shardrec.dev/shardrec at version v${VERSION} as a file-based module proxy
# (GOPROXY=file://${PROXY_DIR}): @v/list, .info, .mod and .zip. The zip names no path: its cgo
# line asks pkg-config for shardrec-rpath (shardrec.pc plus an rpath to the library folder, so
# programs start without LD_LIBRARY_PATH), found through PKG_CONFIG_PATH=<prefix>/lib/pkgconfig
# wherever the prefix was installed, moved or copied to. The zip's files are thus the same for
# every prefix, and a go.sum written against one install verifies against another.
# Called at install time with -DGO_DIR, -DLICENSE, -DSTAGE, -DPROXY_DIR, -DVERSION, -DTIME.
set(module shardrec.dev/shardrec)
set(version v${VERSION})
# A staging folder of this install's own: installs of one build tree into several prefixes may
# run at once (the install-consumer tests under ctest -j do), and a shared one raced.
string(MD5 prefix_tag "${PROXY_DIR}")
string(RANDOM LENGTH 8 tag)
set(STAGE ${STAGE}/${prefix_tag}-${tag})
set(root ${STAGE}/${module}@${version})
file(REMOVE_RECURSE ${STAGE})
file(MAKE_DIRECTORY ${root}/internal/swig)

file(GLOB sources RELATIVE ${GO_DIR} ${GO_DIR}/*.go ${GO_DIR}/internal/swig/*.go
     ${GO_DIR}/internal/swig/*.c)
list(FILTER sources EXCLUDE REGEX "_test\\.go$")
foreach(f IN LISTS sources)
  file(READ ${GO_DIR}/${f} text)
  if(f STREQUAL "internal/swig/swig_shardrec.go")
    string(FIND "${text}" "#cgo pkg-config: shardrec\n" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${f}: no '#cgo pkg-config: shardrec' line to replace")
    endif()
    string(REPLACE "#cgo pkg-config: shardrec\n" "#cgo pkg-config: shardrec-rpath\n"
      text "${text}")
  endif()
  file(WRITE ${root}/${f} "${text}")
endforeach()
file(COPY_FILE ${GO_DIR}/go.mod ${root}/go.mod)
file(COPY_FILE ${LICENSE} ${root}/LICENSE)

set(v ${PROXY_DIR}/${module}/@v)
file(MAKE_DIRECTORY ${v})
file(REMOVE ${v}/${version}.zip)
# Entries are files only, each under "<module>@<version>/", as the go command requires.
file(GLOB_RECURSE entries RELATIVE ${STAGE} ${root}/*)
list(SORT entries)
execute_process(COMMAND ${CMAKE_COMMAND} -E tar cf ${v}/${version}.zip --format=zip
                        "--mtime=1980-01-02 00:00:00 UTC" ${entries}
                WORKING_DIRECTORY ${STAGE} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cannot write ${v}/${version}.zip")
endif()
file(REMOVE_RECURSE ${STAGE})
file(COPY_FILE ${GO_DIR}/go.mod ${v}/${version}.mod)
file(WRITE ${v}/${version}.info "{\"Version\":\"${version}\",\"Time\":\"${TIME}\"}\n")
file(WRITE ${v}/list "${version}\n")
message(STATUS "Installing: ${PROXY_DIR}/${module} (Go module proxy, ${version})")
