# Man pages and bash completions of every tool (ATTNKIT_TOOLS: one per tools/*.cpp), made from the
# tools' own --help at build time and installed to share/man/man1 and share/bash-completion/completions.
#   build/man/man1/TOOL.1               cmake/man_page.sh with help2man (Debian package help2man); skipped,
#                                       with a message, without it. Its SEE ALSO names the other tools' pages
#                                       and the manuals installed from docs/ to CMAKE_INSTALL_DOCDIR
#                                       (share/doc/attnkit, cmake/install.cmake).
#   build/completions/TOOL              cmake/bash_completion.sh (bash and awk)
# Off in sanitizer builds (the tools would run under the sanitizers at build time) and for cross builds.
option(ATTNKIT_TOOL_DOCS "Generate and install man pages and bash completions of the tools" ON)
if(NOT ATTNKIT_TOOL_DOCS OR ATTNKIT_SANITIZE OR CMAKE_CROSSCOMPILING)
  return()
endif()
find_program(HELP2MAN_PROGRAM help2man)
if(NOT HELP2MAN_PROGRAM)
  message(STATUS "help2man not found: the tools' man pages are skipped (apt-get install help2man)")
endif()
set(_outputs "")
foreach(tool ${ATTNKIT_TOOLS})
  set(_completion ${CMAKE_BINARY_DIR}/completions/${tool})
  add_custom_command(OUTPUT ${_completion}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/completions
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bash_completion.sh $<TARGET_FILE:${tool}> ${_completion}
    DEPENDS ${tool} ${CMAKE_CURRENT_LIST_DIR}/bash_completion.sh VERBATIM)
  list(APPEND _outputs ${_completion})
  install(FILES ${_completion} DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
  if(HELP2MAN_PROGRAM)
    set(_man ${CMAKE_BINARY_DIR}/man/man1/${tool}.1)
    add_custom_command(OUTPUT ${_man}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man/man1
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/man_page.sh ${HELP2MAN_PROGRAM} $<TARGET_FILE:${tool}> ${_man}
              ${CMAKE_INSTALL_FULL_DOCDIR} ${ATTNKIT_TOOLS}
      DEPENDS ${tool} ${CMAKE_CURRENT_LIST_DIR}/man_page.sh VERBATIM)
    list(APPEND _outputs ${_man})
    install(FILES ${_man} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  endif()
endforeach()
add_custom_target(tool_docs ALL DEPENDS ${_outputs})
