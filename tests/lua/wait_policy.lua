-- Prints the OpenMP wait policy the launcher runs with (tests/capi/tests.cmake:
-- PASSIVE unless the user set one; lua/launcher.cpp's sleep_while_waiting).
print('OMP_WAIT_POLICY=' .. tostring(os.getenv('OMP_WAIT_POLICY')))
