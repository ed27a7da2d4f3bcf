# shardrec_install_plugin(<target>)
# A plugin (libshardrec_cuda, libshardrec_mpi) is versioned like libshardrec itself: the file
# name and SONAME carry SHARDREC_SOVERSION (major.minor while 0.x: libshardrec_mpi.so.0.1), the
# name the loader dlopens (SHARDREC_SOVERSION_STRING in impl/core/config.h). Installs it into
# CMAKE_INSTALL_LIBDIR. Plugins before 0.1.x were named lib<plugin>.so.<major>; the install keeps
# that name as a link to the SONAME for one minor version, for hosts whose SHARDREC_CUDA_PLUGIN /
# SHARDREC_MPI_PLUGIN still names it. The link is made after the plugin is installed (install
# rules run in the order they are declared, and the folder may not exist before).
function(shardrec_install_plugin target)
  set_target_properties(${target} PROPERTIES
    VERSION ${PROJECT_VERSION}
    SOVERSION ${SHARDREC_SOVERSION})
  install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  if(NOT SHARDREC_SOVERSION STREQUAL PROJECT_VERSION_MAJOR)
    set(old lib${target}.so.${PROJECT_VERSION_MAJOR})
    set(dir "\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}")
    install(CODE "file(CREATE_LINK \"$<TARGET_SONAME_FILE_NAME:${target}>\"
        \"${dir}/${old}\" SYMBOLIC)
      message(STATUS \"Installing: ${dir}/${old} (deprecated name, a link)\")")
  endif()
endfunction()
