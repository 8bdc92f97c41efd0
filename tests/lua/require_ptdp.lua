-- Loads the ptdp module and prints its version (tests/capi/tests.cmake: the
-- module refuses a header of another version than its library's).
local ptdp = require 'ptdp'
print('ptdp ' .. ptdp.version() .. ', header ' .. ptdp.header_version)
