# shardrec_plugin_soname(<target>)
# A plugin (libshardrec_cuda, libshardrec_mpi) is versioned like libshardrec itself: the file
# name and SONAME carry SHARDREC_SOVERSION (major.minor while 0.x: libshardrec_mpi.so.0.1), the
# name the loader dlopens (SHARDREC_SOVERSION_STRING in impl/core/config.h). Plugins before 0.1.x
# were named lib<plugin>.so.<major>; the install keeps that name as a link to the plugin for one
# minor version, for hosts whose SHARDREC_CUDA_PLUGIN / SHARDREC_MPI_PLUGIN still names it.
function(shardrec_plugin_soname target)
  set_target_properties(${target} PROPERTIES
    VERSION ${PROJECT_VERSION}
    SOVERSION ${SHARDREC_SOVERSION})
  if(NOT SHARDREC_SOVERSION STREQUAL PROJECT_VERSION_MAJOR)
    set(old lib${target}.so.${PROJECT_VERSION_MAJOR})
    set(dir "\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}")
    install(CODE "file(CREATE_LINK \"$<TARGET_FILE_NAME:${target}>\" \"${dir}/${old}\" SYMBOLIC)
      message(STATUS \"Installing: ${dir}/${old} (deprecated name, a link)\")")
  endif()
endfunction()
