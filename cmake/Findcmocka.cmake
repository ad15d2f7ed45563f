# Finds cmocka (Debian's libcmocka-dev), the test suite's framework, and
# defines cmocka_FOUND, cmocka_VERSION (when pkg-config knows it) and the
# imported target cmocka::cmocka. pkg-config's answer is only a hint: a
# cmocka without its .pc file is found in the usual places too, and
# CMOCKA_INCLUDE_DIR / CMOCKA_LIBRARY may be given by hand.
# -DCMAKE_DISABLE_FIND_PACKAGE_cmocka=ON hides it.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_CMOCKA QUIET cmocka)
endif()
find_path(CMOCKA_INCLUDE_DIR cmocka.h HINTS ${PC_CMOCKA_INCLUDE_DIRS})
find_library(CMOCKA_LIBRARY cmocka HINTS ${PC_CMOCKA_LIBRARY_DIRS})
set(cmocka_VERSION "${PC_CMOCKA_VERSION}")
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(cmocka
  REQUIRED_VARS CMOCKA_LIBRARY CMOCKA_INCLUDE_DIR
  VERSION_VAR cmocka_VERSION)
if(cmocka_FOUND AND NOT TARGET cmocka::cmocka)
  add_library(cmocka::cmocka UNKNOWN IMPORTED)
  set_target_properties(cmocka::cmocka PROPERTIES
    IMPORTED_LOCATION "${CMOCKA_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CMOCKA_INCLUDE_DIR}")
endif()
mark_as_advanced(CMOCKA_INCLUDE_DIR CMOCKA_LIBRARY)
