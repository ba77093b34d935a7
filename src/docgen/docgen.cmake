# Shell completions and man pages, generated from the CLI11 definitions (src/docgen/docgen.h) by
# gpupool-docgen, a build tool that is not installed. They land in the build tree laid out like
# the install tree (share/man/man1, share/bash-completion/completions, ...) and are installed
# from there.
add_executable(gpupool-docgen docgen_main.cc)
target_link_libraries(gpupool-docgen PRIVATE gpupool_cli gpupool_daemon)

set(docgen_dirs man bash-completion zsh fish)
list(TRANSFORM docgen_dirs PREPEND ${CMAKE_BINARY_DIR}/${CMAKE_INSTALL_DATADIR}/ OUTPUT_VARIABLE docgen_paths)
set(docgen_stamp ${CMAKE_CURRENT_BINARY_DIR}/docgen.stamp)
add_custom_command(OUTPUT ${docgen_stamp}
  # Emptied first, so a removed command leaves no page behind.
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${docgen_paths}
  COMMAND gpupool-docgen ${CMAKE_BINARY_DIR}/${CMAKE_INSTALL_DATADIR}
  COMMAND ${CMAKE_COMMAND} -E touch ${docgen_stamp}
  DEPENDS gpupool-docgen
  COMMENT "Generating the shell completions and man pages"
  VERBATIM)
add_custom_target(docgen ALL DEPENDS ${docgen_stamp})

set(generated ${CMAKE_BINARY_DIR}/${CMAKE_INSTALL_DATADIR})
install(DIRECTORY ${generated}/man/ DESTINATION ${CMAKE_INSTALL_MANDIR})
install(DIRECTORY ${generated}/bash-completion/completions/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
install(DIRECTORY ${generated}/zsh/vendor-completions/ DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions)
install(DIRECTORY ${generated}/fish/vendor_completions.d/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fish/vendor_completions.d)
