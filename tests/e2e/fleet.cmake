# End-to-end tests of a fleet (docs/fleet.md), included from tests/CMakeLists.txt.
#   e2e.fleet         two edgelm nodes behind nginx on loopback (skips, exit 77,
#                     when nginx is missing and cannot be installed)
#   e2e.fleet_deploy  example config, metric docs, plan --systemd, cmake --install
find_program(EDGELM_BASH bash REQUIRED)

add_test(NAME e2e.fleet
         COMMAND ${EDGELM_BASH} ${CMAKE_CURRENT_LIST_DIR}/fleet_test.sh $<TARGET_FILE:edgelm>)
set_tests_properties(e2e.fleet PROPERTIES
  SKIP_RETURN_CODE 77
  TIMEOUT 120
  LABELS "e2e;fleet")

add_test(NAME e2e.fleet_deploy
         COMMAND ${EDGELM_BASH} ${CMAKE_CURRENT_LIST_DIR}/fleet_deploy_test.sh $<TARGET_FILE:edgelm> ${CMAKE_BINARY_DIR})
set_tests_properties(e2e.fleet_deploy PROPERTIES
  TIMEOUT 60
  LABELS "e2e;fleet")
