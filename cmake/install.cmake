# Install rules (included from the top-level CMakeLists.txt): the public
# header, libfusednorm.so (+ soname links) and libfusednorm.a, a pkg-config
# file and a CMake package whose targets are fusednorm::fusednorm (shared) and
# fusednorm::fusednorm_static, each carrying its OpenMP (and CUDA runtime)
# dependency. Also the ctest test that installs into a temporary prefix and
# builds a consumer both ways.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(FILES ${PROJECT_SOURCE_DIR}/include/fusednorm.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS fusednorm fusednorm_static EXPORT fusednormTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(FUSEDNORM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fusednorm)
install(EXPORT fusednormTargets NAMESPACE fusednorm:: DESTINATION ${FUSEDNORM_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/fusednormConfig.cmake.in
  ${PROJECT_BINARY_DIR}/fusednormConfig.cmake INSTALL_DESTINATION ${FUSEDNORM_CMAKE_DIR})
# 0.x releases may change the ABI between minor versions, so a request for
# 0.1 is not satisfied by 0.2.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fusednormConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fusednormConfig.cmake ${PROJECT_BINARY_DIR}/fusednormConfigVersion.cmake
        DESTINATION ${FUSEDNORM_CMAKE_DIR})

# pkg-config: a static link needs the OpenMP runtime (and cudart) that the
# shared library already records as its own dependencies, hence Libs.private.
set(FUSEDNORM_PC_LIBS_PRIVATE "")
foreach(lib IN LISTS OpenMP_C_LIBRARIES)
  if(IS_ABSOLUTE "${lib}")
    get_filename_component(dir "${lib}" DIRECTORY)
    get_filename_component(name "${lib}" NAME_WE)
    string(REGEX REPLACE "^lib" "" name "${name}")
    if(NOT dir MATCHES "^/(usr/)?lib(64)?(/x86_64-linux-gnu|/aarch64-linux-gnu)?$")
      string(APPEND FUSEDNORM_PC_LIBS_PRIVATE " -L${dir}")
    endif()
    string(APPEND FUSEDNORM_PC_LIBS_PRIVATE " -l${name}")
  elseif(lib)
    string(APPEND FUSEDNORM_PC_LIBS_PRIVATE " -l${lib}")
  endif()
endforeach()
if(FUSEDNORM_WITH_CUDA)
  # The .cu objects are C++ (nvcc's host compiler): a static link of a C
  # program needs the C++ runtime too.
  string(APPEND FUSEDNORM_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lstdc++")
endif()
string(APPEND FUSEDNORM_PC_LIBS_PRIVATE " -lm")
string(STRIP "${FUSEDNORM_PC_LIBS_PRIVATE}" FUSEDNORM_PC_LIBS_PRIVATE)
# The prefix is found from the .pc file's own location, so that
# `cmake --install --prefix DIR` (make install PREFIX=DIR) gives a correct file.
set(FUSEDNORM_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${FUSEDNORM_PC_DIR}")
  set(FUSEDNORM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH FUSEDNORM_PC_UP /fn_root/${FUSEDNORM_PC_DIR} /fn_root)
  string(REGEX REPLACE "/$" "" FUSEDNORM_PC_UP "${FUSEDNORM_PC_UP}")
  set(FUSEDNORM_PC_PREFIX "\${pcfiledir}/${FUSEDNORM_PC_UP}")
endif()
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${kind}}")
    set(FUSEDNORM_PC_${kind} "${CMAKE_INSTALL_${kind}}")
  else()
    set(FUSEDNORM_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/fusednorm.pc.in ${PROJECT_BINARY_DIR}/fusednorm.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/fusednorm.pc DESTINATION ${FUSEDNORM_PC_DIR})

# Install into a scratch prefix and build the README's example against it
# with pkg-config and with find_package (shared and static), then run both.
if(FUSEDNORM_BUILD_TESTS AND EXISTS ${PROJECT_SOURCE_DIR}/tests_install/run.sh)
  add_test(NAME install_consumer
           COMMAND sh ${PROJECT_SOURCE_DIR}/tests_install/run.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}
                   ${CMAKE_C_COMPILER} ${CMAKE_COMMAND})
  set_tests_properties(install_consumer PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE)
endif()
