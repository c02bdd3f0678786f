# Run by `cmake --install`: records where the library went, so the
# installed package finds it without KPIPE_LIBRARY (python/kpipe/_lib.py).
set(kp_dir "${CMAKE_INSTALL_PREFIX}/${KP_PY_DIR}/kpipe")
if(IS_ABSOLUTE "${KP_PY_DIR}")
  set(kp_dir "${KP_PY_DIR}/kpipe")
endif()
file(WRITE "$ENV{DESTDIR}${kp_dir}/_install.py"
     "# Written by cmake --install.\nLIBRARY = \"${CMAKE_INSTALL_PREFIX}/${KP_LIBDIR}/${KP_LIBNAME}\"\n")
message(STATUS "Installing: ${kp_dir}/_install.py")
