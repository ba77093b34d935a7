# Run at install time (install(SCRIPT) in packaging/CMakeLists.txt, which sets the GPUPOOL_*
# variables): gzips the man pages just installed and the changelog, as Debian's policy asks,
# with -n (no name or time stamp in the header) so that the package is reproducible. Only the
# pages this build generated: another package's pages under the same prefix are left alone.
# install_manifest.txt (which names files without DESTDIR) then lists the .gz files instead.
foreach(dir_variable GPUPOOL_MANDIR GPUPOOL_DOCDIR)
  if(NOT IS_ABSOLUTE "${${dir_variable}}")
    set(${dir_variable} "${CMAKE_INSTALL_PREFIX}/${${dir_variable}}")
  endif()
endforeach()
file(GLOB_RECURSE pages RELATIVE "${GPUPOOL_BUILT_MAN_DIR}" "${GPUPOOL_BUILT_MAN_DIR}/*")
list(TRANSFORM pages PREPEND "${GPUPOOL_MANDIR}/")
foreach(path IN LISTS pages ITEMS "${GPUPOOL_DOCDIR}/changelog")
  set(installed "$ENV{DESTDIR}${path}")
  message(STATUS "Compressing: ${installed}.gz")
  execute_process(COMMAND gzip -9nf "${installed}" COMMAND_ERROR_IS_FATAL ANY)
  list(REMOVE_ITEM CMAKE_INSTALL_MANIFEST_FILES "${path}")
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${path}.gz")
endforeach()
